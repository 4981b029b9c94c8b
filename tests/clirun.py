"""The command line run in-process for the tests (imported by test modules: pytest puts tests/ on the path)."""
from memsym.cli import main


def run(capsys, *argv):
    """(exit code, stdout, stderr) of ``memsym *argv``, an argparse exit included."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err
