from tests.bot.app_fixtures import app  # noqa: F401
from tests.bot.app_fixtures import bare_remote  # noqa: F401
from tests.bot.app_fixtures import forge  # noqa: F401
from tests.bot.app_fixtures import packed_template  # noqa: F401
from tests.bot.app_fixtures import server  # noqa: F401
