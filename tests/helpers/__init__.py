"""What the tests and the benchmarks share, and nothing a user of bonusjudge needs.

The engine's stand-in set-up (:mod:`tests.helpers.engine`: the Levin request, a quiet grader, a
judge scripted per task), ``bonusjudge`` run as users run it (:mod:`tests.helpers.processes`),
throwaway Redis and PostgreSQL servers (:mod:`tests.helpers.redis_server`,
:mod:`tests.helpers.postgres_server`: the dev extra installs their servers), the fault-injection
suite's tools (:mod:`tests.helpers.faults`), the tenant and upload probes of the benchmarks
(:mod:`tests.helpers.tenants`, :mod:`tests.helpers.uploads`) and the cache oracle
(:mod:`tests.helpers.cache_oracle`).

They lived in the shipped ``standins`` package; only the stand-in judge server
(:mod:`standins.openai_server`), which a harness author runs without an API key, ships. Import
each from its module: this package's import loads nothing.
"""
