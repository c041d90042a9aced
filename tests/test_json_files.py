"""Tests for the declared JSON formats of the data layer (`data.json_files`) and the readers
that use them: one-line errors naming the file and the key, defaults of optional keys."""
import json

import pytest

from fedjax_sharp.data import json_files
from fedjax_sharp.data import text
from fedjax_sharp.errors import DataError

Key = json_files.Key
SCHEMA = json_files.Schema("a test file", "a JSON object with \"name\"", (
    Key("name", str, "a string"),
    Key("version", int, "1", default=1, values=(1,)),
    Key("tags", list, "a list of strings", default=[], items=str),
))


def write(tmp_path, obj, name="f.json"):
  path = str(tmp_path / name)
  with open(path, "w") as f:
    f.write(obj if isinstance(obj, str) else json.dumps(obj))
  return path


def error(path, schema=SCHEMA):
  with pytest.raises(DataError) as e:
    json_files.read_object(path, schema)
  msg = str(e.value)
  assert "\n" not in msg and msg.startswith(path), msg
  return msg


def test_valid_object_gets_its_defaults_and_keeps_other_keys(tmp_path):
  obj = json_files.read_object(write(tmp_path, {"name": "a", "extra": 3}), SCHEMA)
  assert obj == {"name": "a", "extra": 3, "version": 1, "tags": []}
  raw = {"name": "a"}
  checked = json_files.check_object(raw, SCHEMA, "here")
  checked["tags"].append("x")           # a copy of the default, not the schema's own
  assert raw == {"name": "a"} and json_files.check_object(raw, SCHEMA, "here")["tags"] == []


def test_each_problem_is_one_line_naming_the_file_and_the_key(tmp_path):
  assert "no 'name'" in error(write(tmp_path, {"version": 1}, "missing.json"))
  assert "'name' must be a string, got 3" in error(write(tmp_path, {"name": 3}, "type.json"))
  assert "'version' must be 1, got True" in error(write(tmp_path, {"name": "a", "version": True},
                                                        "bool.json"))
  assert "'version' must be 1, got 2" in error(write(tmp_path, {"name": "a", "version": 2},
                                                     "value.json"))
  assert "'tags' must be a list of strings, got 5 at index 1" in error(
      write(tmp_path, {"name": "a", "tags": ["x", 5]}, "items.json"))
  assert "not a test file" in error(write(tmp_path, [1, 2], "list.json"))
  assert "not valid JSON" in error(write(tmp_path, "{oops", "bad.json"))
  assert "cannot be read" in error(str(tmp_path / "absent.json"))


def test_vocabulary_without_optional_keys_reads_with_the_defaults(tmp_path):
  path = write(tmp_path, {"format": text.FORMAT, "version": text.VERSION,
                          "tokens": ["<pad>", "<unk>", "a"]})
  v = text.load_vocabulary(path)
  assert v.tokens == ("<pad>", "<unk>", "a") and (v.min_count, v.max_size) == (1, 0)
  assert v.ids(["a", "b"]) == [2, text.UNK_ID]
  bad = write(tmp_path, {"format": text.FORMAT, "version": text.VERSION, "tokens": ["<pad>"],
                         "min_count": "2"}, "bad.json")
  with pytest.raises(DataError, match="'min_count' must be an integer"):
    text.load_vocabulary(bad)


def test_leaf_entries_are_checked_once_and_empty_ones_of_dropped_users_skipped(tmp_path):
  from fedjax_sharp.data import leaf   # pylint: disable=g-import-not-at-top
  read = leaf._read_leaf_file          # pylint: disable=protected-access
  parse = lambda what, xs, ys: (xs, ys)
  obj = {"users": ["u"], "user_data": {"u": {"x": [1], "y": [2]}, "gone": {"x": [], "y": []},
                                       "old": {}}}
  assert read(write(tmp_path, obj), parse) == {"u": ([1], [2])}
  obj["user_data"]["u"] = [[1], [2]]
  with pytest.raises(DataError) as e:
    read(write(tmp_path, obj, "bad.json"), parse)
  msg = str(e.value)
  assert "bad.json: user 'u': not a 'user_data' entry" in msg and "\n" not in msg, msg
