"""pseudoformer/weights"""
