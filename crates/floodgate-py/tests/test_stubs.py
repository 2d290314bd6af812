"""The shipped type stubs describe the module as it is: every public name and method."""

import ast
import pathlib

import floodgate
import floodgate._floodgate as native


def stub_tree():
    path = pathlib.Path(native.__file__).with_name("_floodgate.pyi")
    assert path.exists(), path
    return ast.parse(path.read_text())


def test_stubs_and_py_typed_are_installed():
    pkg = pathlib.Path(floodgate.__file__).parent
    assert (pkg / "py.typed").exists()
    import rate_limiter

    assert (pathlib.Path(rate_limiter.__file__).parent / "py.typed").exists()


def test_every_public_name_and_method_is_stubbed():
    tree = stub_tree()
    stubbed = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            stubbed[node.name] = {
                n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stubbed[node.name] = set()
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                stubbed[t.id] = set()
        elif isinstance(node, ast.AnnAssign):
            stubbed[node.target.id] = set()
    for name in floodgate.__all__:
        assert name in stubbed, f"{name} missing from _floodgate.pyi"
        obj = getattr(floodgate, name)
        if isinstance(obj, type) and name in stubbed and stubbed[name]:
            public = {m for m in vars(obj) if not m.startswith("_")}
            assert public <= stubbed[name], f"{name}: {public - stubbed[name]} not stubbed"
            assert stubbed[name] - {"__init__", "__bool__", "__eq__", "__hash__", "__len__"} <= set(dir(obj))


def test_no_stub_repeats_a_decorator():
    # a repeated @property makes a type checker reject the stub
    for node in ast.walk(stub_tree()):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [ast.dump(d) for d in node.decorator_list]
            assert len(names) == len(set(names)), f"{node.name}: a decorator twice"
