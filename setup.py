"""Packaging for embryo: every setting lives in settings.ini (nbdev's single source of truth)."""
import shlex
from configparser import ConfigParser

import setuptools

ini = ConfigParser(delimiters=["="])
ini.read("settings.ini", encoding="utf-8")
cfg = ini["DEFAULT"]

setuptools.setup(
    name=cfg["lib_name"],
    version=cfg["version"],
    description=cfg["description"],
    author=cfg["author"],
    author_email=cfg["author_email"],
    license="Apache-2.0",
    keywords=cfg["keywords"],
    url=cfg["git_url"],
    packages=setuptools.find_packages(include=[cfg["lib_path"], cfg["lib_path"] + ".*"]),
    include_package_data=True,
    install_requires=shlex.split(cfg.get("requirements", "")),
    extras_require={"dev": shlex.split(cfg.get("dev_requirements", ""))},
    python_requires=">=" + cfg["min_python"],
    long_description=open("README.md", encoding="utf8").read(),
    long_description_content_type="text/markdown",
    zip_safe=False,
    entry_points={
        "console_scripts": cfg.get("console_scripts", "").split(),
        "nbdev": [f'{cfg["lib_path"]}={cfg["lib_path"]}._modidx:d'],
    },
)
