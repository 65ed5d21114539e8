"""Small helpers shared by the Python integration tests (tests/integration, tests/slurm)."""
import socket
import subprocess
import urllib.request


def check(cond, msg):
    """Fails the test with `msg` unless `cond`; prints the check otherwise."""
    if not cond:
        raise AssertionError(msg)
    print("ok:", msg, flush=True)


def free_port():
    """A loopback TCP port that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def promtool_accepts(promtool, name, text):
    """`promtool check metrics` accepts the exposition `text` of `name`, printing nothing."""
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    check(lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(),
          "promtool check metrics accepts the %s's exposition (%d lines)%s" %
          (name, len(text.splitlines()), (": " + lint.stdout + lint.stderr) if lint.returncode else ""))
