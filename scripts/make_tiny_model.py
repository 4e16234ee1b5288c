"""Write the suite's tiny random Llama (tests/tf_server.py: a tokenizer trained on a generated corpus, a 2-layer
LlamaConfig, nothing downloaded) under a folder, for a real ``transformers serve`` outside the test suite (the
device's campaign against it). Usage: python3 scripts/make_tiny_model.py FOLDER"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.tf_server import make_tiny_model

if __name__ == "__main__":
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    print(make_tiny_model(folder))
