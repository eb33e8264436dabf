# MiTA-Segmenter-T: the CBT decoder (CBSAHead) on a ViT-T whose attention
# is MiTA (_base_/models/white_box_encoders.py, mita_vit_t). The released
# MiTA-Segmenter is the CBT segmentation code with MiTA in the encoder:
# decoder, training and test as cbsa_vit-t (README.md, "Recipe"). Weights:
#   python tools/model_converters/timm2mmseg.py --to white-box \
#       vit_tiny_patch16_384.pth pretrain/vit_tiny_patch16_384_white-box.pth
_base_ = ['../cbsa/cbsa_vit-t_8xb1-160k_ade20k-512x512.py',
          '../_base_/models/white_box_encoders.py']
model = dict(pretrained=None, backbone=dict(_base_.mita_vit_t, _delete_=True))
