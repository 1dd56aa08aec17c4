#!/usr/bin/env python3
"""scripts/build-desktop-guest --print-hash: the cache key of the real guest's image. It must change with every
file of a variant's recipe (content and mode) and with nothing else: not with the other variant's files, not with
the domain XML or the README, not with where the repository is. Runs on copies of the recipe; needs no root, no
network."""

import os
import shutil
import subprocess
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def make_tree(parent):
    tree = os.path.join(parent, "repo")
    os.makedirs(os.path.join(tree, "scripts"))
    shutil.copy(os.path.join(REPO, "scripts", "build-desktop-guest"), os.path.join(tree, "scripts"))
    shutil.copytree(os.path.join(REPO, "guest", "desktop"), os.path.join(tree, "guest", "desktop"))
    return tree


def hash_of(tree, variant):
    p = subprocess.run([os.path.join(tree, "scripts", "build-desktop-guest"), "--variant", variant, "--print-hash"],
                       capture_output=True, text=True, check=True)
    return p.stdout.strip()


class RecipeHash(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp)
        self.tree = make_tree(self.tmp)
        self.base = {v: hash_of(self.tree, v) for v in ("minimal", "desktop")}

    def path(self, *parts):
        return os.path.join(self.tree, "guest", "desktop", *parts)

    def changed(self):
        now = {v: hash_of(self.tree, v) for v in ("minimal", "desktop")}
        return {v for v in now if now[v] != self.base[v]}

    def test_form_and_stability(self):
        for v, h in self.base.items():
            self.assertRegex(h, r"^[0-9a-f]{16}$", v)
        self.assertNotEqual(self.base["minimal"], self.base["desktop"])
        self.assertEqual(self.changed(), set())

    def test_same_anywhere(self):
        other = make_tree(os.path.join(self.tmp, "elsewhere", "deeper"))
        self.assertEqual({v: hash_of(other, v) for v in self.base}, self.base)

    def test_desktop_package_list(self):
        with open(self.path("image", "packages-desktop.txt"), "a") as f:
            f.write("gimp\n")
        self.assertEqual(self.changed(), {"desktop"})

    def test_common_file(self):
        with open(self.path("image", "rootfs", "common", "etc", "systemd", "network", "20-wired.network"), "a") as f:
            f.write("\n")
        self.assertEqual(self.changed(), {"minimal", "desktop"})

    def test_mode(self):
        os.chmod(self.path("image", "rootfs", "common", "usr", "local", "sbin", "halite-report-state"), 0o644)
        self.assertEqual(self.changed(), {"minimal", "desktop"})

    def test_new_desktop_file(self):
        with open(self.path("image", "rootfs", "desktop", "usr", "share", "halite", "extra.html"), "w") as f:
            f.write("<p>x</p>\n")
        self.assertEqual(self.changed(), {"desktop"})

    def test_the_page(self):
        with open(self.path("image", "rootfs", "desktop", "usr", "share", "halite", "counters.html"), "a") as f:
            f.write("<!-- -->\n")
        self.assertEqual(self.changed(), {"desktop"})

    def test_not_the_domain_or_readme(self):
        for name in ("domain.xml", "README.md"):
            with open(self.path(name), "a") as f:
                f.write("\n")
        self.assertEqual(self.changed(), set())

    def test_the_script_itself(self):
        with open(os.path.join(self.tree, "scripts", "build-desktop-guest"), "a") as f:
            f.write("# a change\n")
        self.assertEqual(self.changed(), {"minimal", "desktop"})


if __name__ == "__main__":
    unittest.main()
