"""`make lab` (issue 76, item 1): JupyterLab at the repository root, so that a results cell's `../figures/...` images are
served, opening nbs/index.ipynb, and starting when run as root. The test starts the command `make -n lab` prints (what a
user runs, in the environment running the tests) on a free port of 127.0.0.1 with a token, fetches through the server a
figure that a notebook's results cell links, and stops the server whatever happens."""
import json, os, posixpath, re, secrets, shlex, signal, socket, subprocess, sys, time
import urllib.error, urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def lab_command():
    "The `jupyter lab` line of `make -n lab`, in the environment of the interpreter running the tests."
    venv = Path(sys.executable).parent.parent
    r = subprocess.run(["make", "-n", "lab", f"VENV={venv}", "NO_BROWSER=1"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = r.stdout.replace("\\\n", " ")  # a recipe line continued with a backslash is one shell command
    lines = [l for l in text.splitlines() if re.search(r"\bjupyter(-| )lab\b", l)]
    assert len(lines) == 1, f"`make -n lab` runs no single `jupyter lab` command:\n{r.stdout}"
    return lines[0].strip()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def linked_figure():
    "A PNG that an analysis notebook's results cell links as ../figures/...: (notebook, link) as written in nbs/."
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] != "markdown": continue
            for link in re.findall(r"\]\((\.\./figures/[^)\s]+\.png)\)", "".join(cell["source"])):
                if (nb.parent / link).resolve().is_file(): return nb, link
    pytest.fail("no notebook links a committed ../figures/*.png")


def get(url, redirect=True):
    opener = urllib.request.build_opener() if redirect else urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(url, timeout=10) as r: return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e: return e.code, dict(e.headers), e.read()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs): return None


def test_make_lab_serves_the_figures_a_results_cell_links(tmp_path):
    cmd, port, token = lab_command(), free_port(), secrets.token_hex(16)
    nb, link = linked_figure()
    # The figure's path as JupyterLab resolves the link: from the notebook's folder, relative to the server's root.
    rel = posixpath.normpath(posixpath.join(nb.parent.relative_to(ROOT).as_posix(), link))
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_DATA_DIR": str(tmp_path / "data")}  # nothing of the user's Jupyter set-up read or written
    log = open(tmp_path / "lab.log", "w+")
    proc = subprocess.Popen(["bash", "-c", f"exec {cmd} --port={port} --ServerApp.port_retries=0 --ip=127.0.0.1 "
                             f"--IdentityProvider.token={token}"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, up = time.monotonic() + 60, False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1): up = True; break
            except OSError: time.sleep(0.2)
        log.seek(0); out = log.read()[-3000:]
        assert up, f"`{cmd}` did not start (exit {proc.poll()}):\n{out}"
        status, headers, body = get(f"{base}/files/{rel}?token={token}")
        assert status == 200, f"{nb.name}'s {link} through the server: {status} for /files/{rel} (`{cmd}`)"
        assert body[:8] == b"\x89PNG\r\n\x1a\n", f"/files/{rel} is not a PNG: {body[:40]!r}"
        assert body == (nb.parent / link).read_bytes()
        # The page it opens: the root redirects to nbs/index.ipynb in JupyterLab.
        status, headers, _ = get(f"{base}/?token={token}", redirect=False)
        assert status in (301, 302, 303, 307) and headers["Location"].split("?")[0].endswith("/lab/tree/nbs/index.ipynb"), (status, headers)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try: proc.wait(timeout=15)
            except subprocess.TimeoutExpired: os.killpg(proc.pid, signal.SIGKILL); proc.wait()
        log.close()
