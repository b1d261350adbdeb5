import sys

from onnx_struct.cli import main

sys.exit(main())
