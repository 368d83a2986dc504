"""Sums JUnit XML results of every suite and prints the one closing line of `make test`."""
import sys
import xml.etree.ElementTree as ET


def count(path):
    """(passed, failed, skipped) of one JUnit file; failures and skips are printed by name,
    skips with their reason, so nothing drops out of the run unseen."""
    passed = failed = skipped = 0
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, FileNotFoundError) as e:
        print(f"{path}: unreadable results ({e})", file=sys.stderr)
        return 0, 1, 0
    for case in root.iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            failed += 1
            name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
            print(f"FAILED {name}: {(problem.get('message') or '').strip()[:300]}", file=sys.stderr)
        elif case.find("skipped") is not None:
            skipped += 1
            name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
            why = case.find("skipped").get("message") or "(no reason given)"
            print(f"SKIPPED {name}: {why.strip()[:300]}")
        else:
            passed += 1
    return passed, failed, skipped


def main(paths):
    totals = [0, 0, 0]
    if not paths:
        totals[1] = 1
    for p in paths:
        for i, n in enumerate(count(p)):
            totals[i] += n
    passed, failed, skipped = totals
    line = f"{passed} passed, {failed} failed"
    print(line + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
