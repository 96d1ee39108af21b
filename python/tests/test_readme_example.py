"""The docs' Python example is this test's body, quoted verbatim (docs/getting-started/python.md)."""

from conftest import REPO


def test_readme_example():
    # example-begin
    import kvpolicy
    from kvpolicy.vllm import OffloadingManager

    # One eviction policy by name, over integer ids.
    lru = kvpolicy.EvictionPolicy("lru", capacity=4)
    lru.insert([0, 1, 2, 3])
    lru.access(0)  # block 0 is hot again
    lru.hold(1)  # a running request holds block 1
    assert lru.pop_victims(2).tolist() == [2, 3]  # never the held block, never the hot one

    # vLLM's offloading manager, backed by any policy: ARC here.
    manager = OffloadingManager(num_blocks=2, policy="arc")
    out = manager.prepare_store([101, 102])  # where to store these blocks
    manager.complete_store(out.block_hashes_to_store)
    assert manager.lookup([101, 102, 103]) == 2  # a prefix of two blocks is offloaded
    assert manager.prepare_store([103]).block_hashes_evicted == [101]

    # kvpolicy-sim as a function: one dict per (policy, capacity).
    rows = kvpolicy.simulate(policies=["lru", "belady"], capacities=[500], sessions=40)
    assert rows[1]["hits"] >= rows[0]["hits"]  # Belady, the offline optimum
    # example-end


def test_the_docs_quote_the_example_verbatim():
    lines = open(__file__).read().splitlines()
    begin = next(i for i, line in enumerate(lines) if line.strip() == "# example-begin")
    end = next(i for i, line in enumerate(lines) if line.strip() == "# example-end")
    body = "\n".join(line[4:] for line in lines[begin + 1 : end]) + "\n"  # the test's indent removed
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    quoted = [p for p in pages if "```python\n" + body + "```" in p.read_text()]
    assert quoted, "README.md or a page under docs/ must quote python/tests/test_readme_example.py's example"
