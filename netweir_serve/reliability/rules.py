"""``--policy PROJECT[/SPIDER]:KEY=VALUE[,KEY=VALUE...]``: the policies of
a project and of its spiders, given once per rule on the command line."""

from dataclasses import dataclass, field

from ..names import fold
from .policy import JobPolicy, PolicyError


@dataclass(frozen=True)
class PolicyRules:
    """The --policy rules, by folded project and (project, spider) names."""

    projects: dict = field(default_factory=dict)
    spiders: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, texts):
        """The rules of the ``--policy`` texts, in the order given (a key a
        later rule of the same target repeats replaces it); a PolicyError
        naming the rule that cannot be read."""
        projects, spiders = {}, {}
        for text in texts:
            target, policy = parse_rule(text)
            project, _, spider = target.partition("/")
            table, key = (spiders, (fold(project), spider)) if spider else (projects, fold(project))
            table[key] = policy.over(table.get(key, JobPolicy()))
        return cls(projects, spiders)

    def for_project(self, project):
        """The project's own rule (JobPolicy(), none, without one)."""
        return self.projects.get(fold(project), JobPolicy())

    def for_spider(self, project, spider):
        """The policy a job of ``spider`` gets before its schedule's or its
        own values: the spider's rule over the project's."""
        base = self.projects.get(fold(project), JobPolicy())
        return self.spiders.get((fold(project), spider), JobPolicy()).over(base)

    def spiders_named(self, project):
        """The spider names the rules of ``project`` name."""
        return [spider for folded, spider in self.spiders if folded == fold(project)]

    def projects_named(self):
        """The folded project names the rules name (each must be served)."""
        return set(self.projects) | {project for project, _ in self.spiders}


def parse_rule(text):
    """(``PROJECT`` or ``PROJECT/SPIDER``, JobPolicy) of one --policy text."""
    target, colon, pairs = text.partition(":")
    if not colon or not target.strip() or not pairs.strip():
        raise PolicyError(f"--policy {text!r} is not a rule: give PROJECT[/SPIDER]:KEY=VALUE"
                          "[,KEY=VALUE...], e.g. shop:timeout=6h,retries=2")
    project, _, spider = target.strip().partition("/")
    if not project or "/" in spider or (target.strip().endswith("/") and not spider):
        raise PolicyError(f"--policy {text!r}: {target!r} is not PROJECT or PROJECT/SPIDER")
    texts = {}
    for pair in _pairs(pairs):
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise PolicyError(f"--policy {text!r}: {pair!r} is not KEY=VALUE")
        texts[key.strip()] = value.strip()
    try:
        return target.strip(), JobPolicy.parse(texts)
    except PolicyError as e:
        raise PolicyError(f"--policy {text!r}: {e.message}") from None


def _pairs(text):
    """KEY=VALUE pairs separated by commas, where retry_on's value is itself
    a list: a piece without '=' belongs to the pair before it."""
    pairs = []
    for piece in text.split(","):
        if "=" in piece or not pairs:
            pairs.append(piece)
        else:
            pairs[-1] += "," + piece
    return [pair.strip() for pair in pairs]
