"""bonusjudge: grade free-form answers by bonus-point coverage and defects, with cached judge calls."""
