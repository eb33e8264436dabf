# DEPICT-CA (MSSAHead, mode='ca'): MSSA layers over the patches, then the
# class embeddings cross-attend to them.
_base_ = './mssa_vit-l_8xb1-160k_ade20k-640x640.py'
model = dict(decode_head=dict(mode='ca'))
