"""The console's pages as resources: each answers its shell (see
``console.shell``), which its script fills from the JSON API."""

from twisted.web.resource import Resource

from ... import __version__
from ...access.roles import identity_of
from ..answer import write_error
from ..deferred import render_result
from ..pages import HtmlPage, about_sections, refuse_method, write_html
from . import names_below, shell, static_files


class JobsPage(HtmlPage):
    """``/``: the jobs, and what the home page always said below them.
    ScrapydWeb checks that ``GET /`` answers 200 before it starts."""

    def __init__(self, projects):
        super().__init__()
        self.projects = projects

    def page(self, request):
        identity = identity_of(request)
        seen = [name for name in self.projects.names() if identity.sees(name)]
        return shell("Jobs", "jobs", '<div id="jobs-console"></div>\n'
                     + about_sections(seen, __version__), charts=True)


class FixedPage(HtmlPage):
    """A console page with no names in its path (``/schedules``, ``/nodes``)."""

    def __init__(self, title, script, charts=False):
        super().__init__()
        self.title, self.script, self.charts = title, script, charts

    def page(self, request):
        return shell(self.title, self.script, charts=self.charts)


class NamedPage(Resource):
    """A console page about names in its path: ``/job/PROJECT/JOBID``,
    ``/spider/PROJECT/SPIDER``. The names go to the script as ``data-``
    attributes; whether they exist is the API's to say (the script shows
    its answer), so a job that ends or is pruned while its page is open is
    told the same way."""

    isLeaf = True

    def __init__(self, title, script, keys):
        super().__init__()
        self.title, self.script, self.keys = title, script, keys

    def render(self, request):
        names = names_below(request, len(self.keys))
        if names is None:
            shape = "/".join(key.upper() for key in self.keys)
            return write_error(request, 404, f"no such page: the path is /{self.script}/{shape}")
        refused = refuse_method(request)
        if refused is not None:
            return refused
        data = dict(zip(self.keys, names))
        text = shell(f"{self.title} {'/'.join(names)}", self.script, data=data, charts=True)
        return render_result(request, text, lambda text: write_html(request, text),
                             lambda failure: HtmlPage._failed(failure, request))


def console_pages(api):
    """{path segment: resource} of the console, for Root's ``pages``."""
    return {
        b"": JobsPage(api.projects),
        b"job": NamedPage("Job", "job", ("project", "job")),
        b"spider": NamedPage("Spider", "spider", ("project", "spider")),
        b"schedules": FixedPage("Schedules", "schedules"),
        b"nodes": FixedPage("Nodes", "nodes"),
        b"console": static_files(),
    }
