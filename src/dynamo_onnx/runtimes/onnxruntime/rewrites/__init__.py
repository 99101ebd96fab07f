"""Rewrite rules, in onnxscript's form, that onnxscript's ORT fusions do not have yet: one
rule per module, each tried by ``fusions.py`` at its place in onnxscript's sequence. Rules
that hold a model family's conventions are the family's, handed over through the protocol's
runtime slot (``ModelFamily.runtime_steps``)."""

from dynamo_onnx.runtimes.onnxruntime.rewrites.cos_sin_cache import CosSinCacheOfProduct
from dynamo_onnx.runtimes.onnxruntime.rewrites.gqa import GroupQueryAttentionOfIndexMask
from dynamo_onnx.runtimes.onnxruntime.rewrites.index_mask import MaskForm, index_mask_form
from dynamo_onnx.runtimes.onnxruntime.rewrites.same_shape_reshape import SameShapeReshape

__all__ = [
    "CosSinCacheOfProduct",
    "GroupQueryAttentionOfIndexMask",
    "MaskForm",
    "SameShapeReshape",
    "index_mask_form",
]
