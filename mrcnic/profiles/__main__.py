"""``python -m mrcnic.profiles``: the profile lifecycle as a Mermaid state diagram."""

from mrcnic.profiles.lifecycle import mermaid

print(mermaid())
