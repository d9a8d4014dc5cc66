"""One share of a ``--processes`` study, started by its first process (:mod:`octlm.studies.shared.processes`).

``python -m octlm.studies.shared.worker KIND I/N THREADS OPTIONS``: ``KIND``
``length`` or ``tasks``, share ``I`` of ``N``, torch's ``THREADS``, and the
study's options as JSON (what :func:`~octlm.declare.plain_dict` gives). It
continues the study folder the first process prepared, trains and scores
its share's models, and exits: 0 when they are recorded, 1 with the error on
its last line, 130 when interrupted (its model's checkpoint saved).
"""

from __future__ import annotations

import json
import sys

from octlm.errors import OctlmError


def main(argv: list[str]) -> int:
    from octlm.declare import build
    from octlm.report import Reporter
    from octlm.studies.shared.spread import Share, parse_shard

    kind, shard, threads, options = argv
    index, count = parse_shard(shard)
    share = Share(index, count, "worker", threads=int(threads))
    report = Reporter()
    try:
        if kind == "length":
            from octlm.studies.length.options import LengthOptions
            from octlm.studies.length.study import length_study

            length_study(build(LengthOptions, json.loads(options)), report, share)
        else:
            from octlm.studies.tasks.options import TaskOptions
            from octlm.studies.tasks.study import task_study

            task_study(build(TaskOptions, json.loads(options)), report, share=share)
    except OctlmError as err:
        report.error(str(err))
        return 1
    except KeyboardInterrupt:
        report.error("interrupted; the parts of this share already recorded are kept")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
