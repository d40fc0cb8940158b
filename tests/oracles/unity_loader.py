"""
Unity ML-Agents' model loader, re-implemented in Python: every check of the C# side that would reject an
ONNX file, or fail when running it, for files of model API version 3 (ML-Agents 2.x to 4.x), so that a test can say
that Unity loads a file without a Unity installation.

Sources (read, not copied), in github.com/Unity-Technologies/ml-agents, ``com.unity.ml-agents/Runtime/``:

- ``Inference/SentisModelParamLoader.cs`` (``CheckModel``, ``CheckModelVersion``, ``CheckInputTensorPresence``,
  ``CheckInputTensorShape``, ``CheckVisualObsShape`` / ``CheckRankTwoObsShape`` / ``CheckRankOneObsShape``,
  ``CheckOutputTensorShape``, ``CheckContinuousActionOutputShape``, ``CheckDiscreteActionOutputShape``,
  ``CheckOutputTensorPresence``): the checks Unity runs when a model is assigned (ML-Agents 3.x and 4.x; 2.x's
  ``BarracudaModelParamLoader.cs`` has the same ones);
- ``Inference/SentisModelExtensions.cs`` (3.x) and ``Inference/SentisModelInfo.cs`` (4.x): ``CheckExpectedTensors``,
  the constants read as ``float`` tensors (3.x from the model's constants, 4.x by running the model once on zero
  inputs whose dynamic dimensions are 1: ``Inference/DynamicTensorShapeExtensions.cs``), ``GetOutputNames``;
- ``Inference/TensorNames.cs``: the names;
- ``Inference/TensorGenerator.cs`` (``GenerateTensors``: an input without a generator throws) and
  ``Inference/GeneratorImpl.cs`` (``RecurrentInputGenerator``, ``ActionMaskInputGenerator``,
  ``ObservationGenerator``: what Unity writes into each input, as ``float``);
- ``Inference/ApplierImpl.cs`` (``ContinuousActionOutputApplier``, ``DiscreteActionOutputApplier``,
  ``MemoryOutputApplier``): how it reads each output back;
- ``Sensors/ObservationWriter.cs`` (``WriteTexture``: pixels divided by 255, so images arrive in [0, 1]) and
  ``Agent.cs`` (``SensorUtils.SortSensors``: sensors sorted by name, sensor ``i`` feeds ``obs_i``).

And Unity's ONNX importer (Sentis 2.1, ``Editor/ONNX/ONNXModelConverter.cs`` and ``ONNXNodeWrapper.cs`` of the
``com.unity.sentis`` package): an operator it does not implement is an import error, and its data types map to
``float`` and ``int`` (``DataTypeFromOnnxDataType``). The list of operators is the one of Sentis's documentation page
"Supported ONNX operators" (https://docs.unity3d.com/Packages/com.unity.sentis@2.1/manual/supported-operators.html;
the same list, GRU still unsupported, in Inference Engine 2.4:
https://docs.unity3d.com/Packages/com.unity.ai.inference@2.4/manual/supported-operators.html), and the opsets are
those of its page "Import a model file" (opsets 7 to 15).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from gymnasium import spaces
from onnx import TensorProto

# TensorNames.cs
OBSERVATION_PREFIX = "obs_"
RECURRENT_IN = "recurrent_in"
ACTION_MASKS = "action_masks"
VERSION_NUMBER = "version_number"
MEMORY_SIZE = "memory_size"
RECURRENT_OUT = "recurrent_out"
CONTINUOUS_ACTIONS, DETERMINISTIC_CONTINUOUS_ACTIONS = "continuous_actions", "deterministic_continuous_actions"
DISCRETE_ACTIONS, DETERMINISTIC_DISCRETE_ACTIONS = "discrete_actions", "deterministic_discrete_actions"
CONTINUOUS_ACTION_OUTPUT_SHAPE = "continuous_action_output_shape"
DISCRETE_ACTION_OUTPUT_SHAPE = "discrete_action_output_shape"
# TensorGenerator.cs: the inputs Unity has a generator for, besides one obs_<i> per sensor
GENERATED_INPUTS = {"batch_size", "sequence_length", RECURRENT_IN, "prev_action", ACTION_MASKS, "epsilon"}

# SentisModelParamLoader.cs, ModelApiVersion: MLAgents1_0 = 2, MLAgents2_0 = 3 (obs_<i> inputs, recurrent_in/out)
MIN_SUPPORTED_VERSION, MAX_SUPPORTED_VERSION, OBS_NAMES_VERSION = 2, 3, 3

# Sentis 2.1, "Supported ONNX operators" (docs page above): every ONNX operator it imports. LSTM is "Not supported"
# on BackendType.GPUPixel only (ML-Agents runs CPU/Burst or GPUCompute); GRU, RNN, Loop, Scan and If are unsupported
# The page's table as words (a list literal would take one line per operator)
SENTIS_OPERATORS = frozenset(
    """
    Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization Bernoulli Cast CastLike
    Ceil Celu Clip Compress Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum DepthToSpace Div
    Dropout Einsum Elu Equal Erf Exp Expand Flatten Floor Gather GatherElements GatherND Gemm GlobalAveragePool
    GlobalMaxPool Greater GreaterOrEqual GridSample Hardmax HardSigmoid HardSwish Identity InstanceNormalization
    IsInf IsNaN LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax LRN LSTM MatMul Max MaxPool Mean Min Mod
    Mul Multinomial Neg NonMaxSuppression NonZero Not OneHot Or Pad Pow PRelu RandomNormal RandomNormalLike
    RandomUniform RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax
    ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize RoiAlign Round Scatter
    ScatterElements ScatterND Selu Shape Shrink Sigmoid Sign Sin Sinh Size Slice Softmax Softplus Softsign
    SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile TopK Transpose Trilu Unsqueeze Upsample
    Where Xor
    """.split()  # noqa: SIM905
)
# Sentis's "Import a model file" page: opsets 7 to 15 (others "might still import" with unexpected results)
SENTIS_OPSETS = range(7, 16)
# ONNXNodeWrapper.DataTypeFromOnnxDataType: what Sentis makes of ONNX's element types
SENTIS_FLOAT = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
SENTIS_INT = {
    TensorProto.UINT8,
    TensorProto.INT8,
    TensorProto.UINT16,
    TensorProto.INT16,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.BOOL,
    TensorProto.UINT32,
    TensorProto.UINT64,
}
NUMPY_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64}


@dataclass(frozen=True)
class BehaviorParameters:
    """
    What the Unity side declares: the sensors' observation shapes in Unity's order (sorted by sensor name) and the
    action spec.

    :param sensors: Each sensor's ``ObservationSpec`` shape (images ``(C, H, W)``, channel-first since ML-Agents 3)
    :param continuous_size: ``ActionSpec.NumContinuousActions``
    :param branches: ``ActionSpec.BranchSizes``
    """

    sensors: tuple[tuple[int, ...], ...]
    continuous_size: int
    branches: tuple[int, ...]


def behavior_parameters(observation_space: spaces.Space, action_space: spaces.Space) -> BehaviorParameters:
    """
    The ``Behavior Parameters`` matching a policy's spaces: one sensor per observation (a ``Dict``'s keys in the
    space's order, Unity's order when the sensors are named after the keys: docs/guide/deploy_reference.md), a ``Discrete``
    observation as one float (its index), ``MultiDiscrete`` and ``MultiBinary`` as their entries.

    :param observation_space: The policy's observation space
    :param action_space: The policy's action space
    :return: The parameters
    """
    subspaces = list(observation_space.spaces.values()) if isinstance(observation_space, spaces.Dict) else [observation_space]
    sensors = tuple(
        (1,) if isinstance(space, spaces.Discrete) else tuple(int(n) for n in space.shape or ()) for space in subspaces
    )
    if isinstance(action_space, spaces.Box):
        return BehaviorParameters(sensors, int(np.prod(action_space.shape)), ())
    if isinstance(action_space, spaces.Discrete):
        return BehaviorParameters(sensors, 0, (int(action_space.n),))
    if isinstance(action_space, spaces.MultiDiscrete):
        return BehaviorParameters(sensors, 0, tuple(int(n) for n in action_space.nvec))
    assert isinstance(action_space, spaces.MultiBinary)
    return BehaviorParameters(sensors, 0, (2,) * int(np.prod(action_space.shape)))


def _dims(value: onnx.ValueInfoProto) -> list[int | str | None]:
    """A value's dimensions: ints, a symbolic name, or ``None`` when unknown."""
    return [
        dim.dim_value if dim.HasField("dim_value") else (dim.dim_param if dim.HasField("dim_param") else None)
        for dim in value.type.tensor_type.shape.dim
    ]


def _input_dependent(graph: onnx.GraphProto, inputs: set[str]) -> set[str]:
    """The names of the values computed from a graph input (the others are constants Sentis folds)."""
    dependent = set(inputs)
    for node in graph.node:  # ONNX graphs are topologically sorted
        if any(name in dependent for name in node.input):
            dependent.update(node.output)
    return dependent


def check_static(path: str | Path, parameters: BehaviorParameters) -> list[str]:
    """
    The checks on the file itself: import, names, ranks, dtypes, dynamic axes, and which outputs are constants.

    :param path: The ONNX file
    :param parameters: The Unity side's declarations
    :return: The failures, each naming the C# check it mirrors; ``[]`` when Unity accepts the file
    """
    model = onnx.load(str(path))
    graph = model.graph
    failures: list[str] = []
    # ONNXModelConverter.cs, OnNode: an operator outside the list is "<op> not supported", an import error
    for op_type in sorted({node.op_type for node in graph.node if node.domain in ("", "ai.onnx")} - SENTIS_OPERATORS):
        failures.append(f"ONNXModelConverter.OnNode: {op_type} not supported by Sentis")
    failures.extend(
        f"ONNXModelConverter: operator domain {d!r} not supported" for d in {n.domain for n in graph.node} - {"", "ai.onnx"}
    )
    opset = next(entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx"))
    if opset not in SENTIS_OPSETS:
        failures.append(f"Sentis 'Import a model file': opset {opset} is outside 7 to 15")
    initializers = {tensor.name for tensor in graph.initializer}
    inputs = {value.name: value for value in graph.input if value.name not in initializers}
    outputs = {value.name: value for value in graph.output}

    # SentisModelExtensions.CheckExpectedTensors / SentisModelInfo.CheckExpectedTensors
    for constant in (VERSION_NUMBER, MEMORY_SIZE):
        if constant not in outputs:
            failures.append(f"CheckExpectedTensors: required constant {constant!r} was not found")
    action_outputs = {CONTINUOUS_ACTIONS, DISCRETE_ACTIONS, DETERMINISTIC_CONTINUOUS_ACTIONS, DETERMINISTIC_DISCRETE_ACTIONS}
    if not action_outputs & set(outputs):
        failures.append("CheckExpectedTensors: the model does not contain any Action Output Node")
    for stochastic, deterministic, shape in (
        (CONTINUOUS_ACTIONS, DETERMINISTIC_CONTINUOUS_ACTIONS, CONTINUOUS_ACTION_OUTPUT_SHAPE),
        (DISCRETE_ACTIONS, DETERMINISTIC_DISCRETE_ACTIONS, DISCRETE_ACTION_OUTPUT_SHAPE),
    ):
        if stochastic in outputs and shape not in outputs:
            failures.append(f"CheckExpectedTensors: {stochastic!r} without the {shape!r} node")
        # CheckContinuousOutputs / CheckDiscreteOutputs: with "Deterministic inference" ticked, the deterministic twin
        if stochastic in outputs and deterministic not in outputs:
            failures.append(f"CheckExpectedTensors: {stochastic!r} without {deterministic!r} (deterministic inference)")
    # SentisModelExtensions.GetTensorByName reads the constants from the model's constants (3.x): they must not
    # depend on an input; SentisModelInfo (4.x) reads them as Tensor<float>
    dependent = _input_dependent(graph, set(inputs))
    for name in (VERSION_NUMBER, MEMORY_SIZE, CONTINUOUS_ACTION_OUTPUT_SHAPE, DISCRETE_ACTION_OUTPUT_SHAPE):
        if name in outputs:
            if name in dependent:
                failures.append(f"SentisModelExtensions.GetTensorByName: {name!r} depends on an input, not a constant")
            if outputs[name].type.tensor_type.elem_type not in SENTIS_FLOAT:
                failures.append(f"SentisModelInfo.GetTensorByNameAsInt: {name!r} is read as Tensor<float>")

    # SentisModelParamLoader.CheckInputTensorPresence (model API version 3)
    for index in range(len(parameters.sensors)):
        if f"{OBSERVATION_PREFIX}{index}" not in inputs:
            failures.append(f"CheckInputTensorPresence: no input for sensor {index} ({OBSERVATION_PREFIX}{index})")
    if RECURRENT_OUT in outputs and RECURRENT_IN not in inputs:
        failures.append("CheckInputTensorPresence: no Recurrent Input Node (recurrent_in) but memory_size")
    if parameters.branches and ACTION_MASKS not in inputs:
        failures.append("CheckInputTensorPresence: no Action Mask (action_masks) but Discrete Control")
    # CheckOutputTensorPresence
    if RECURRENT_IN in inputs and RECURRENT_OUT not in outputs:
        failures.append("CheckOutputTensorPresence: no Recurrent Output Node (recurrent_out) but memory_size")

    # CheckInputTensorShape and TensorGenerator.GenerateTensors: every input needs a tester and a generator
    observation_names = {f"{OBSERVATION_PREFIX}{index}": shape for index, shape in enumerate(parameters.sensors)}
    for name, value in inputs.items():
        if name not in GENERATED_INPUTS and name not in observation_names:
            failures.append(f"CheckInputTensorShape / TensorGenerator.GenerateTensors: unexpected input {name!r}")
            continue
        dims = _dims(value)
        # TensorUtils.ResizeTensor sets axis 0 to the batch; DynamicTensorShapeExtensions.ToArray sizes every other
        # unknown dimension 1, whatever the model needs there
        if not dims:
            failures.append(f"TensorUtils.ResizeTensor: input {name!r} has no batch axis")
        elif any(not isinstance(dim, int) or dim <= 0 for dim in dims[1:]):
            failures.append(f"DynamicTensorShapeExtensions.ToArray: input {name!r} {dims} has a dynamic non-batch axis")
        elif isinstance(dims[0], int):
            # the batch of agents deciding at a step varies: a fixed axis 0 fails for another batch
            failures.append(f"TensorUtils.ResizeTensor: input {name!r} {dims} has a fixed batch axis")
        # GeneratorImpl.cs writes observations, masks and memory as Tensor<float>; ONNXNodeWrapper maps the type
        if value.type.tensor_type.elem_type not in SENTIS_FLOAT:
            failures.append(f"GeneratorImpl: input {name!r} is written as float, the model's type is not a float one")
        if name in observation_names:
            # CheckVisualObsShape (rank 3: C, H, W), CheckRankTwoObsShape, CheckRankOneObsShape
            sensor = observation_names[name]
            if tuple(dims[1:]) != sensor:
                failures.append(f"CheckInputTensorShape: {name!r} is {dims}, the sensor gives {list(sensor)}")
        elif name == ACTION_MASKS and dims[1:] != [sum(parameters.branches)]:
            # ActionMaskInputGenerator: one float per action of every branch, 1 = allowed
            failures.append(f"ActionMaskInputGenerator: action_masks is {dims}, the branches hold {sum(parameters.branches)}")
        elif name == RECURRENT_IN and (len(dims) != 3 or dims[1] != 1):
            # RecurrentInputGenerator writes memory[j] at [agent, 0, j]
            failures.append(f"RecurrentInputGenerator: recurrent_in is {dims}, not (batch, 1, memory_size)")

    # ApplierImpl.cs: the action outputs are read per agent row, discrete ones as ints, continuous ones as floats
    for name in (CONTINUOUS_ACTIONS, DETERMINISTIC_CONTINUOUS_ACTIONS):
        if name in outputs and outputs[name].type.tensor_type.elem_type not in SENTIS_FLOAT:
            failures.append(f"ContinuousActionOutputApplier: {name!r} is read as float")
    for name in (DISCRETE_ACTIONS, DETERMINISTIC_DISCRETE_ACTIONS):
        if name in outputs and outputs[name].type.tensor_type.elem_type not in SENTIS_INT:
            failures.append(f"DiscreteActionOutputApplier: {name!r} is read as int")
    if parameters.continuous_size and CONTINUOUS_ACTIONS not in outputs:
        failures.append("CheckContinuousActionOutputShape: the behaviour has continuous actions, the model none")
    if parameters.branches and DISCRETE_ACTIONS not in outputs:
        failures.append("CheckDiscreteActionOutputShape: the behaviour has discrete branches, the model none")
    return failures


def zero_inputs(session: Any, batch: int) -> dict[str, np.ndarray]:
    """SentisModelInfo's inputs (4.x): zeros, every dynamic dimension sized ``batch`` (1 there)."""
    feed = {}
    for value in session.get_inputs():
        dtype = np.float16 if value.type == "tensor(float16)" else np.float32
        feed[value.name] = np.zeros([dim if isinstance(dim, int) else batch for dim in value.shape], dtype)
    return feed


def check_running(session: Any, parameters: BehaviorParameters) -> list[str]:
    """
    The checks that read the model's values: the constants (SentisModelInfo runs the model once on zero inputs) and
    the shapes of what the appliers read back, at batch 1 and 3.

    :param session: An onnxruntime session of the file
    :param parameters: The Unity side's declarations
    :return: The failures, each naming the C# check it mirrors
    """
    failures: list[str] = []
    names = [value.name for value in session.get_outputs()]
    values = dict(zip(names, session.run(None, zero_inputs(session, 1)), strict=True))
    version = int(np.asarray(values.get(VERSION_NUMBER, [0])).ravel()[0])
    memory = int(np.asarray(values.get(MEMORY_SIZE, [-1])).ravel()[0])
    # SentisModelParamLoader.CheckModelVersion
    if not MIN_SUPPORTED_VERSION <= version <= MAX_SUPPORTED_VERSION:
        failures.append(f"CheckModelVersion: version {version} outside {MIN_SUPPORTED_VERSION} to {MAX_SUPPORTED_VERSION}")
    if version == MIN_SUPPORTED_VERSION and memory > 0:
        failures.append("CheckModelVersion: a version 2 (ML-Agents 1.x) model with memory is not supported")
    if version != OBS_NAMES_VERSION:
        failures.append(f"CheckInputTensorPresence: obs_<i> inputs need model API version {OBS_NAMES_VERSION}, got {version}")
    # CheckModel: memory_size -1 is a missing node
    if memory < 0:
        failures.append("CheckModel: missing node memory_size")
    # CheckContinuousActionOutputShape: the constant's first element against the actuators' continuous size
    continuous = int(np.asarray(values.get(CONTINUOUS_ACTION_OUTPUT_SHAPE, [0])).ravel()[0])
    if continuous != parameters.continuous_size:
        failures.append(
            f"CheckContinuousActionOutputShape: the model has {continuous}, the behaviour {parameters.continuous_size}"
        )
    # CheckDiscreteActionOutputShape: as many elements as branches, each the branch's size
    discrete = np.asarray(values.get(DISCRETE_ACTION_OUTPUT_SHAPE, np.zeros(0))).ravel()
    if [int(n) for n in discrete] != list(parameters.branches):
        failures.append(
            f"CheckDiscreteActionOutputShape: the model has branches {discrete.tolist()}, the behaviour "
            f"{list(parameters.branches)}"
        )
    # Appliers at a batch of 3: the action rows and the memory Unity stores per agent and feeds back
    outputs = dict(zip(names, session.run(None, zero_inputs(session, 3)), strict=True))
    for name, width in (
        (CONTINUOUS_ACTIONS, parameters.continuous_size),
        (DETERMINISTIC_CONTINUOUS_ACTIONS, parameters.continuous_size),
        (DISCRETE_ACTIONS, len(parameters.branches)),
        (DETERMINISTIC_DISCRETE_ACTIONS, len(parameters.branches)),
    ):
        if name in outputs and outputs[name].shape != (3, width):
            failures.append(f"ActionOutputApplier: {name!r} is {outputs[name].shape}, not (batch, {width})")
    if memory > 0:
        recurrent_in = next(value for value in session.get_inputs() if value.name == RECURRENT_IN)
        if RECURRENT_OUT not in outputs or outputs[RECURRENT_OUT].shape != (3, 1, memory):
            failures.append(f"MemoryOutputApplier: recurrent_out is not (batch, 1, memory_size={memory})")
        # RecurrentInputGenerator copies min(width, stored) floats: the input's width must be memory_size
        if recurrent_in.shape[-1] != memory:
            failures.append(
                f"RecurrentInputGenerator: recurrent_in's width {recurrent_in.shape[-1]} is not memory_size {memory}"
            )
    return failures


def unity_failures(path: str | Path, parameters: BehaviorParameters) -> list[str]:
    """
    Every check: :func:`check_static`, then (if it found nothing) :func:`check_running` through onnxruntime.

    :param path: The ONNX file
    :param parameters: The Unity side's declarations
    :return: The failures; ``[]``: Unity's loader accepts the file and its runner can run it
    """
    import onnxruntime as ort

    failures = check_static(path, parameters)
    if failures:
        return failures
    return check_running(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), parameters)


def unity_rollout_feed(
    observations: Sequence[np.ndarray], masks: np.ndarray | None, memory: np.ndarray, dtype: type = np.float32
) -> dict[str, np.ndarray]:
    """
    The inputs Unity's generators write for one decision (GeneratorImpl.cs): ``obs_<i>`` per sensor, ``action_masks``
    (1 = allowed) and ``recurrent_in`` ``(batch, 1, memory_size)``, all floats.

    :param observations: Each sensor's observations, in Unity's order, already in Unity's scale
    :param masks: ``(batch, sum of branches)`` booleans, ``True`` = allowed; ``None`` for a continuous behaviour
    :param memory: The stored memories ``(batch, 1, memory_size)`` (zeros for agents whose episode starts)
    :param dtype: The file's float type
    :return: The feed
    """
    feed: dict[str, np.ndarray] = {
        f"{OBSERVATION_PREFIX}{index}": np.asarray(value, dtype) for index, value in enumerate(observations)
    }
    if masks is not None:
        feed[ACTION_MASKS] = masks.astype(dtype)
    feed[RECURRENT_IN] = memory.astype(dtype)
    return feed
