"""The long fuzz campaign: hostile models, random graphs and hostile feeds, in worker
processes with a per-case timeout, so hangs and crashes are counted, not fatal.

    python benchmarks/fuzz_campaign.py --cases 20000 --seed 1 --jobs 2 --timeout-s 20

Prints counts per kind and outcome (ok, typed_error, mismatch, foreign_exception, hang,
crash), the most frequent typed errors, and for every bug and mismatch its case id and
traceback. Reproduce any case in-process with::

    from onyxrt.testing.fuzz import FuzzCase, run_case
    print(run_case(FuzzCase("<kind>", seed=<seed>, index=<index>)))

Exits with status 1 when a bug (foreign exception, hang, crash) was found.
"""

from __future__ import annotations

import argparse
import sys
import time

from onyxrt.testing.fuzz import BUGS, KINDS, CampaignReport, campaign_cases, run_campaign


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=20.0, help="per-case bound (hang past it)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {KINDS}")
    parser.add_argument("--no-oracle", action="store_true", help="do not compare with onnxruntime")
    parser.add_argument("--memory-limit-mb", type=int, default=4096, help="address space per worker")
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kinds {unknown}; choose from {KINDS}")

    last = [time.monotonic()]

    def progress(report: CampaignReport) -> None:
        if time.monotonic() - last[0] > 30:
            last[0] = time.monotonic()
            bugs = sum(report.total(o) for o in BUGS)
            print(f"  ... {report.results}/{args.cases} cases, {bugs} bugs", file=sys.stderr, flush=True)

    print(f"fuzz campaign: {args.cases} cases, seed {args.seed}, {args.jobs} jobs, "
          f"timeout {args.timeout_s:g} s per case, kinds {kinds}", flush=True)
    report = run_campaign(
        campaign_cases(args.cases, args.seed, kinds), jobs=args.jobs, timeout_s=args.timeout_s,
        oracle=not args.no_oracle, memory_limit_mb=args.memory_limit_mb, progress=progress, seed=args.seed,
    )
    print(f"\n{report.results} cases in {report.seconds:.0f} s ({report.results / max(report.seconds, 1e-9):.0f}/s)\n")
    print(report.table())
    print(f"\ntyped errors that onnxruntime ran (feature gaps, not bugs): {report.oracle_ran_on_typed_errors}")
    print("\nmost frequent typed errors:")
    for name, count in report.errors.most_common(12):
        print(f"  {count:7d}  {name}")
    if report.findings:
        print(f"\n{len(report.findings)} findings (bugs first):")
        for r in sorted(report.findings, key=lambda r: (not r.is_bug, r.outcome, r.case.index)):
            print(f"\n--- {r.outcome} in {r.case} (stage {r.stage or '-'}):")
            print(r.detail.rstrip())
    bugs = report.bugs
    print(f"\nbugs (foreign exceptions, hangs, crashes): {len(bugs)}")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
