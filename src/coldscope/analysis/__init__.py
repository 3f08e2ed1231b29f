"""Pure judgements of runs: findings with the seconds at stake (``findings``) and differences with
intervals and verdicts (``comparison``)."""
