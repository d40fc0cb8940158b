"""``read_zoo_yaml``: the RL Zoo's saved YAML files, read with libyaml's parser, hold what PyYAML's own parser reads."""

from collections import OrderedDict
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sb3_reset_ppo.common.utils import read_zoo_yaml

ORDERED_DICT = "tag:yaml.org,2002:python/object/apply:collections.OrderedDict"


class _PurePythonZooLoader(yaml.SafeLoader):
    """The reference: PyYAML's pure-Python safe loader with the zoo's ``OrderedDict`` tag."""


_PurePythonZooLoader.add_constructor(ORDERED_DICT, lambda loader, node: dict(loader.construct_sequence(node, deep=True)[0]))

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12), st.just("1e-05")
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=10), values, max_size=6))
def test_a_saved_zoo_file_reads_as_pyyaml_reads_it(tmp_path_factory: Any, hyperparams: dict[str, Any]) -> None:
    # The zoo dumps its config.yml and args.yml as OrderedDicts, which yaml.dump writes with a Python tag
    path = Path(tmp_path_factory.mktemp("zoo")) / "config.yml"
    path.write_text(yaml.dump(OrderedDict(hyperparams)))
    read = read_zoo_yaml(path)
    assert read == yaml.load(path.read_text(), Loader=_PurePythonZooLoader) == hyperparams
    assert type(read) is dict


def test_libyaml_parses_where_pyyaml_has_it(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "args.yml"
    path.write_text(yaml.dump(OrderedDict([("algo", "reset_ppo"), ("n_timesteps", 1e5)])))
    parsed: list[str] = []
    if yaml.__with_libyaml__:
        original = yaml.CSafeLoader.get_single_data

        def spy(loader: Any) -> Any:
            parsed.append("libyaml")
            return original(loader)

        monkeypatch.setattr(yaml.CSafeLoader, "get_single_data", spy)
    assert read_zoo_yaml(path) == {"algo": "reset_ppo", "n_timesteps": 1e5}
    assert parsed == (["libyaml"] if yaml.__with_libyaml__ else [])
