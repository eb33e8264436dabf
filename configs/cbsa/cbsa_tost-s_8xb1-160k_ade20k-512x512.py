# The CBT decoder (CBSA head) on the ToST-S encoder, trained from random
# initialisation as its released factory starts (pretrained=None: no released
# segmentation weights; _base_/models/white_box_encoders.py)
_base_ = ['./cbsa_vit-s_8xb1-160k_ade20k-512x512.py',
          '../_base_/models/white_box_encoders.py']
model = dict(pretrained=None, backbone=dict(_base_.tost_s, _delete_=True),
             decode_head=dict(in_channels=384, channels=384))
