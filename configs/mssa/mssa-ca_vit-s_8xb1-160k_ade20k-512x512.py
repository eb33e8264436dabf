# DEPICT-CA (MSSAHead, mode='ca'): MSSA layers over the patches, then the
# class embeddings cross-attend to them.
_base_ = './mssa_vit-s_8xb1-160k_ade20k-512x512.py'
model = dict(decode_head=dict(mode='ca'))
