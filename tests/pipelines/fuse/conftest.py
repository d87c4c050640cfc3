"""The Triton kernels run on CPU tensors through the interpreter; it must be on before they are imported."""

import os

os.environ["TRITON_INTERPRET"] = "1"
