"""The README's complete Python example runs as written, against a real
router (only its socket path changes)."""

import contextlib
import io
import re
import unittest

from _router import REPO, Router


def readme_example():
    text = (REPO / "README.md").read_text()
    section = text[text.index("\n## Python\n"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


class ReadmeExampleTest(unittest.TestCase):
    def test_the_first_example_runs_as_written(self):
        code = readme_example()
        self.assertIn('"/tmp/flybus.sock"', code)
        router = Router()
        self.addCleanup(router.stop)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code.replace('"/tmp/flybus.sock"', repr(router.socket)), "README.md", "exec"), {})
        self.assertEqual(out.getvalue().splitlines(), ["1 {'seq': 1}", "{'got': {'x': 1}}", "NO_TOPIC not-dispatched"])


if __name__ == "__main__":
    unittest.main()
