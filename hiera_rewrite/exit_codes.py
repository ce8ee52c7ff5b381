"""Exit codes of ``hiera-rewrite`` (documented in ``--help`` and README)."""

EXIT_CLEAN = 0  # nothing to rewrite
EXIT_CHANGED = 1  # files changed, or would change
EXIT_ERROR = 2  # usage or input error
EXIT_VERIFY_FAILED = 3  # --verify: a mismatch, a site not proven, or it could not run
