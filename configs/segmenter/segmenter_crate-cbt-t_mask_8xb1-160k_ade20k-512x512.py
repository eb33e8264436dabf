# The Segmenter mask head on the CRATE+CBT-T encoder, trained from random
# initialisation as its released factory starts (pretrained=None: no released
# segmentation weights; _base_/models/white_box_encoders.py)
_base_ = ['./segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py',
          '../_base_/models/white_box_encoders.py']
model = dict(pretrained=None, backbone=dict(_base_.crate_cbt_t, _delete_=True),
             decode_head=dict(in_channels=192, channels=192, embed_dims=192))
