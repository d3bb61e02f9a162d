"""bonusjudge: grade free-form answers by bonus-point coverage and defects (cached judge calls)."""
