"""The only code that starts engine processes: one start-up (``runner``), two configurations in
turn (``interleave``), each release from its own environment (``releases``, ``envs``)."""
