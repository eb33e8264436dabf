from .white_box_vit import WhiteBoxViT

__all__ = ['WhiteBoxViT']
