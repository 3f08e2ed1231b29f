"""Adapters that put coldscope's start-up-aware scaling inside real autoscalers.

One module per autoscaler, each a thin seam between that autoscaler's contract and
``coldscope.ScaleAdvisor`` (``coldscope.scaling``): the policy is the advisor's, the adapter
only maps the autoscaler's view (requests in flight, replicas running and starting, its
clock) onto a tick and the decision back. Modules:

* ``ray_serve``: ``ColdscopePolicy``, a Ray Serve class autoscaling policy
  (``autoscaling_config={"policy": {"policy_function":
  "coldscope.integrations.ray_serve:ColdscopePolicy", "policy_kwargs": {...}}}``).

Importing this package imports no adapter and no autoscaler: each module is imported by name,
and the autoscaler's own package (Ray, an optional extra: ``pip install 'coldscope[ray]'``)
is never imported by coldscope, only called through the objects it hands in.
docs/autoscale.md has the configurations, tested.
"""
