"""The command-line layer under ``tools/``: the options the tools share,
their Runner configs, and how a failure is reported."""
from mmseg_whitebox.engine.runner_config import drop_training, load_config
from mmseg_whitebox.utils.tool_error import (BAD_INPUT, INTERNAL_ERROR,
                                             ToolError)
from .options import (CfgOptionsAction, DeviceAction, add_cfg_options_arg,
                      add_checkpoint_check_args, add_common_args,
                      add_dataclass_args, add_device_arg, options_from_args,
                      tool_parser)
from .runner import (INTERRUPTED, end_process_group, exit_distributed_worker,
                     resumable, run_tool)

__all__ = [
    'BAD_INPUT', 'CfgOptionsAction', 'DeviceAction', 'INTERNAL_ERROR',
    'INTERRUPTED', 'ToolError', 'add_cfg_options_arg',
    'add_checkpoint_check_args', 'add_common_args', 'add_dataclass_args',
    'add_device_arg', 'options_from_args', 'drop_training',
    'end_process_group', 'exit_distributed_worker', 'load_config',
    'resumable', 'run_tool', 'tool_parser'
]
