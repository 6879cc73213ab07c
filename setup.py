from setuptools import find_packages, setup

setup(
    name="tb-attention",
    version="0.1.0",
    description="TensorBoard plugin and CLI: where attention spends GPU time in PyTorch profiler traces",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tb_attention_plugin", "tb_attention_plugin.*"]),
    package_data={"tb_attention_plugin": ["static/*", "static/**/*", "advice/data/*.json"]},
    python_requires=">=3.9",
    install_requires=[
        "msgspec>=0.18",
        "numpy>=1.22",
        "isal>=1.0",
        "tensorboard>=2.12",
        "werkzeug>=2.0",
        "dask[distributed]>=2023.1",  # ranks|summarize|analyze --scheduler/--workers (ranks/distributed.py)
    ],
    entry_points={
        "console_scripts": ["tb-attention=tb_attention_plugin.cli:run"],
        "tensorboard_plugins": ["attention=tb_attention_plugin.plugin:AttentionPlugin"],
    },
    classifiers=["Programming Language :: Python :: 3", "Framework :: TensorBoard"],
)
