"""Compares two JUnit XML reports of run_torch_dist_tests.py (gloo and
ucxcoll): lists every test that passed on gloo but not on ucxcoll, and
exits non-zero if there is one that is not in KNOWN (name: reason).

    python test/conformance/compare.py gloo.xml ucxcoll.xml
"""

import sys
import xml.etree.ElementTree as ET

# Tests that pass on gloo and cannot pass on a plugin backend, with the reason.
KNOWN: dict[str, str] = {}


def outcomes(path: str) -> dict[str, str]:
    result = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        status = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed"
            elif child.tag == "skipped":
                status = "skipped"
        result[case.get("name")] = status
    return result


def main() -> int:
    gloo, ours = outcomes(sys.argv[1]), outcomes(sys.argv[2])
    passed_on_gloo = sorted(name for name, status in gloo.items() if status == "passed")
    missing = [name for name in passed_on_gloo if ours.get(name) != "passed"]
    print(f"gloo passed {len(passed_on_gloo)}; ucxcoll passed "
          f"{sum(1 for name in passed_on_gloo if ours.get(name) == 'passed')} of those "
          f"({sum(1 for s in ours.values() if s == 'passed')} in all)")
    unexplained = []
    for name in missing:
        reason = KNOWN.get(name)
        print(f"  {name}: {ours.get(name, 'not run')}" + (f" (known: {reason})" if reason else ""))
        if reason is None:
            unexplained.append(name)
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
