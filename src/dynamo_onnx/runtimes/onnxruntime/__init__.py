"""ONNX Runtime: its fused operators (GroupQueryAttention, RotaryEmbedding, SimplifiedLayerNormalization) and what onnxruntime-genai may do with them."""
