# DEPICT-CA: MSSA over the patches, then class embeddings cross-attend.
_base_ = './depict-sa_vit-b_8xb1-160k_ade20k-512x512.py'
model = dict(decode_head=dict(mode='ca'))
