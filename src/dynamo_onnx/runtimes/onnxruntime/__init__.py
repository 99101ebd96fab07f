"""ONNX Runtime: its fused operators (GroupQueryAttention, RotaryEmbedding,
SimplifiedLayerNormalization) and its quantized MatMulNBits weights."""
