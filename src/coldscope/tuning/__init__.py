"""``coldscope tune``: find the fastest start-up of an engine command on this machine, and prove
it (per-stage timelines, the same greedy tokens, a serving-throughput check).

``tune`` the entry points (open a new or interrupted session, run it to a ``TuneResult``);
``search`` the pure search (deterministic given the measurements, so a session resumes by
replaying them); ``verify`` the checks run while a trial's engine is up; ``session`` the
stored, resumable tune session; ``report`` its result (what ``tune --json`` prints);
``bundle`` the pre-seeded cache artifact; ``tuned`` the loader ``plan --tuned`` uses. The
records are frozen (``search.TuneRecord``), changed only through a validated copy; the
catalogue of knobs comes from the engine's adapter (``Engine.tune_catalogue``), so nothing here
knows an engine by name.
"""
