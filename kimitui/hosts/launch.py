"""How the agent is started on a host (the caller's side; the agent itself is kimitui/hostside/agent/).

``agent_command`` runs ``PYTHON -u -c BOOTSTRAP``; ``agent_payload`` is what goes on its stdin: the length
of the agent's program (kimitui/hosts/bundle.py: one payload of the hostside modules it imports) and the
token, then the program. The bootstrap checks the python's version first, in syntax any python parses, so a
python older than 3.8 says so in one line.
"""

from __future__ import annotations

from kimitui.hosts.bundle import AGENT, program
from kimitui.hostside.wire import TOKEN_RE

MIN_PYTHON = (3, 8)
OLD_PYTHON_EXIT = 5

_BOOTSTRAP = (
    "import os,sys\n"
    "def rd(n):\n"
    " b=b''\n"
    " while len(b)<n:\n"
    "  c=os.read(0,n-len(b))\n"
    "  if not c:sys.exit(4)\n"
    "  b+=c\n"
    " return b\n"
    "h=b''\n"
    "while not h.endswith(b'\\n'):h+=rd(1)\n"
    "h=h.split()\n"
    "k=h[1].decode('ascii') if len(h)>1 else ''\n"
    "v=sys.version_info\n"
    "if v<(%d,%d):\n"
    " import json\n"
    " sys.stdout.write((k and '{\"k\":\"'+k+'\",' or '{')+json.dumps({'t':0,'type':'fatal','message':"
    "'python %%d.%%d.%%d at %%s is too old: the kimitui agent needs python >= %d.%d'%%(v[0],v[1],v[2],"
    "sys.executable)})[1:]+'\\n')\n"
    " sys.stdout.flush()\n"
    " sys.exit(%d)\n"
    "src=rd(int(h[0]))\n"
    "import types\n"
    "m=types.ModuleType('__main__')\n"
    "m.__dict__['__builtins__']=__builtins__\n"
    "m.__dict__['_KIMITUI_TOKEN']=k\n"
    "sys.modules['__main__']=m\n"
    "sys.argv=['kimitui-agent']+sys.argv[1:]\n"
    "exec(compile(src,'kimitui-agent','exec'),m.__dict__)\n"
)


def bootstrap(min_python: tuple[int, int] = MIN_PYTHON) -> str:
    """Run as ``python3 -u -c BOOTSTRAP ARGS``: reads ``<length> <token>\\n`` from stdin (unbuffered, so no
    byte past what it needs is consumed), checks the python's version (in syntax any python parses, so a
    too-old one says so in one line, tagged with the token), reads the source, then runs it as the __main__
    module with the token; the rest of stdin is the request channel."""
    return _BOOTSTRAP % (min_python[0], min_python[1], min_python[0], min_python[1], OLD_PYTHON_EXIT)


BOOTSTRAP = bootstrap()


def agent_source() -> bytes:
    """The agent's program: the hostside modules it imports, loaded from memory on the host."""
    return program(AGENT).encode("utf-8")


def agent_payload(token: str = "") -> bytes:
    """What to write to the bootstrap's stdin: the length-prefixed agent source, and the token (hex) the
    agent starts each line it writes with (none: lines untagged)."""
    if not TOKEN_RE.match(token):
        raise ValueError(f"the agent's token must be hex digits, not {token!r}")
    src = agent_source()
    return (b"%d %s\n" % (len(src), token.encode("ascii")) if token else b"%d\n" % len(src)) + src


def agent_command(python: str = "python3", extra: tuple[str, ...] = (),
                  min_python: tuple[int, int] = MIN_PYTHON) -> list[str]:
    """The argv that starts the agent through the bootstrap; send agent_payload() on its stdin."""
    return [python, "-u", "-c", bootstrap(min_python), *extra]
