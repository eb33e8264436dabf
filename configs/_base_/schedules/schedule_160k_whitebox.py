# schedule_160k for the white-box decoders (MSSA, TSSA and CBSA heads):
# their class embeddings are never weight-decayed.
_base_ = './schedule_160k.py'
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys=dict(cls_emb=dict(decay_mult=0.0))))
