"""The one home of the dynamic-shape request: the spellings users write, one normalization
into a frozen :class:`ShapeRequest`, and the operations the passes apply to it.

- ``messages.py``: a spec as a message describes it (:class:`SpecMismatch`, the entry as
  words or as Python source); model families raise it for their own forms.
- ``forms.py``: the caller's spec checked against the inputs it describes, by name or by
  position, a family value's entry read by its family (given: this package sits below
  ``integrations/``).
- ``spellings.py``: each spelling of one request in torch.export's one form.
- ``request.py``: :class:`ShapeRequest`, its one normalization and its operations.

Nothing here records a finding or fails an export: the validate pass turns
:class:`SpecMismatch` and :class:`UnknownSpecName` into its rules.
"""

from __future__ import annotations

from dynamo_onnx.specs.forms import UnknownSpecName
from dynamo_onnx.specs.messages import SpecMismatch
from dynamo_onnx.specs.request import ShapeRequest, Spelling

__all__ = ["ShapeRequest", "SpecMismatch", "Spelling", "UnknownSpecName"]
