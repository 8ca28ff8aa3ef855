"""environment.yml lists the same packages as settings.ini, so conda users get the environment `make test` builds."""
import configparser
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_matches_settings_ini():
    ini = configparser.ConfigParser(delimiters=["="])
    ini.read(ROOT / "settings.ini")
    wanted = shlex.split(ini["DEFAULT"]["requirements"]) + shlex.split(ini["DEFAULT"]["dev_requirements"])
    text = (ROOT / "environment.yml").read_text()
    pip = re.findall(r"^ {6}- (\S.*)$", text[text.index("- pip:"):], re.M)  # the entries under `- pip:`
    assert sorted(pip) == sorted(wanted)
