"""``python -m jepsen_like.checker check|synth ...``"""

from jepsen_like.checker.cli import main

main()
