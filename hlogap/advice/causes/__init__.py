"""One module per cause of lost time; each registers itself with hlogap.advice.base."""
