"""``coldscope tune``: find the fastest start-up of an engine command on this machine, and prove
it (per-stage timelines, the same greedy tokens, a serving-throughput check).

``search`` the pure search (deterministic
given the measurements, so a session resumes by replaying them); ``verify`` the checks run
while a trial's engine is up; ``session`` the stored, resumable tune session; ``bundle`` the
pre-seeded cache artifact; ``tuned`` the loader ``plan --tuned`` uses.
"""
