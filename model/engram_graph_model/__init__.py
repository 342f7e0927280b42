"""all-MiniLM-L6-v2's files for engram-graph's `local` embedding provider: `FILES` holds
model.safetensors, tokenizer.json and the configuration, as sentence-transformers lays them out."""

from pathlib import Path
from typing import Final

FILES: Final = Path(__file__).resolve().with_name("files")
NAME: Final = "all-MiniLM-L6-v2"
