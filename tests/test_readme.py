"""The README's Python example runs as written (it is our own text, not user input)."""
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_starts_with_install_and_test_commands():
    text = README.read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1).strip().splitlines()
    assert "pip install" in block[0] and "memsym reproduce" in block[0]
    assert "pytest" in block[1]


def test_readme_python_example_runs():
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    namespace = {}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - our own README
    assert list(namespace["values"]) == sorted(namespace["values"])
