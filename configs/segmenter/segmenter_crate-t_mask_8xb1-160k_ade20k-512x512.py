# The Segmenter mask head on the CRATE-T encoder, trained from random
# initialisation as its released factory starts (pretrained=None: no released
# segmentation weights; _base_/models/white_box_encoders.py);
# decoder heads = width / 64, the released rule (segm/model/factory.py:91)
_base_ = ['./segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py',
          '../_base_/models/white_box_encoders.py']
model = dict(pretrained=None, backbone=dict(_base_.crate_t, _delete_=True),
             decode_head=dict(in_channels=384, channels=384, embed_dims=384,
                              num_heads=6))
