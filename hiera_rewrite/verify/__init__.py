"""``--verify``: prove a rewrite on the user's own files before anything is written.

The verdict is *site coverage*: every rewritten site (each applied ``path:line CODE``
report) must be run, on both sides, by at least one compared case, and every compared
output and gradient must be equal (float64 on CPU).  A site no case ran is "not proven"
(exit 3, with the class/function holding it and the flag that would reach it); a build
or import failure is only a note unless it leaves a site unproven.

One job per module.  Torch-free, in the CLI's process:

* :mod:`.command` -- ``--verify`` on the command line: rewrite in memory, verify, write;
* :mod:`.layout` -- where the files are imported from (import roots, module names);
* :mod:`.sites` -- the rewritten sites and the lines that prove them;
* :mod:`.runner` -- copy both trees, run the worker, read its report;
* :mod:`.report` -- the tables and the verdict.

In the worker subprocess (the user's environment, torch):

* :mod:`.worker` -- imports each side in turn, builds, runs, traces and compares;
* :mod:`.discovery` -- which models and factories to build;
* :mod:`.arguments` -- their constructor arguments (names, the repo's values, config objects);
* :mod:`.inputs` -- their inputs, extra ``forward`` arguments and cases;
* :mod:`.compare` -- one case run and compared;
* :mod:`.tracing` -- the line tracer;
* :mod:`.cuda` -- ``--verify-cuda``'s training-step timing.
"""

from ..exit_codes import EXIT_VERIFY_FAILED

__all__ = ["EXIT_VERIFY_FAILED"]
