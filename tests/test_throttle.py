"""Failed logins counted per address (access.throttle), at the door
(web/guard.py): past ten a minute, that address alone gets 429 for a
minute, before any checker runs."""

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase
from twisted.web.test.requesthelper import DummyRequest

from netweir_serve.access.throttle import LoginThrottle
from netweir_serve.web.guard import GuardedResource

from .test_guard import CREDENTIALS, GOOD, basic, tree

WRONG = basic(b"me", b"wrong")


class ThrottleTests(TestCase):
    def setUp(self):
        self.clock = Clock()
        self.throttle = LoginThrottle(self.clock)

    def test_past_ten_failures_in_a_minute_the_address_is_refused_for_a_minute(self):
        self.assertEqual([self.throttle.failed("a") for _ in range(10)], [False] * 10)
        self.assertFalse(self.throttle.refused("a"))
        self.assertTrue(self.throttle.failed("a"))
        self.assertTrue(self.throttle.refused("a"))
        self.assertFalse(self.throttle.refused("b"))
        self.clock.advance(59.9)
        self.assertTrue(self.throttle.refused("a"))
        self.clock.advance(0.1)
        self.assertFalse(self.throttle.refused("a"))
        # Counted afresh: ten more are ten, not twenty.
        self.assertEqual([self.throttle.failed("a") for _ in range(10)], [False] * 10)

    def test_failures_older_than_a_minute_are_not_counted(self):
        for _ in range(20):
            self.assertFalse(self.throttle.failed("a"))
            self.clock.advance(6.5)
        self.assertFalse(self.throttle.refused("a"))

    def test_refused_once_logged_once(self):
        logged = []
        from netweir_serve.access import throttle
        self.patch(throttle.log, "warn", lambda *a, **kw: logged.append(kw["address"]))
        for _ in range(30):
            if not self.throttle.refused("a"):
                self.throttle.failed("a")
        self.assertEqual(logged, ["a"])

    def test_memory_is_bounded_by_the_addresses_remembered(self):
        throttle = LoginThrottle(self.clock, max_addresses=100)
        for i in range(10000):
            throttle.failed(f"10.0.{i // 256}.{i % 256}")
        self.assertLessEqual(len(throttle._failures), 100)


def request_from(host, authorization=None):
    request = DummyRequest([b"x"])
    request.client = IPv4Address("TCP", host, 5000)
    if authorization is not None:
        request.requestHeaders.setRawHeaders(b"authorization", [authorization])
    return request


class DoorTests(TestCase):
    def setUp(self):
        self.clock = Clock()
        self.guard = GuardedResource(tree(), credentials=CREDENTIALS, loopback_only=False,
                                     throttle=LoginThrottle(self.clock))

    def code(self, request):
        refusal = self.guard.check(request)
        return 200 if refusal is None else refusal.code

    def test_a_hundred_wrong_passwords_get_429_and_another_address_is_served(self):
        codes, others = [], []
        for _ in range(100):
            codes.append(self.code(request_from("10.0.0.1", WRONG)))
            others.append(self.code(request_from("10.0.0.2", GOOD)))
        self.assertEqual(codes, [401] * 10 + [429] * 90)
        self.assertEqual(others, [200] * 100)
        # The right password from the refused address waits its minute out.
        self.assertEqual(self.code(request_from("10.0.0.1", GOOD)), 429)
        self.clock.advance(60)
        self.assertEqual(self.code(request_from("10.0.0.1", GOOD)), 200)

    def test_a_request_without_credentials_is_no_failure(self):
        codes = [self.code(request_from("10.0.0.1")) for _ in range(50)]
        self.assertEqual(codes, [401] * 50)
        self.assertEqual(self.code(request_from("10.0.0.1", GOOD)), 200)

    def test_a_refused_address_costs_no_checker(self):
        asked = []
        real = self.guard._portal.login
        self.patch(self.guard._portal, "login", lambda *a: asked.append(1) or real(*a))
        for _ in range(50):
            self.code(request_from("10.0.0.1", WRONG))
        self.assertEqual(len(asked), 11)

    def test_a_429_answer_says_when_to_come_back(self):
        for _ in range(11):
            self.code(request_from("10.0.0.1", WRONG))
        refusal = self.guard.check(request_from("10.0.0.1", WRONG))
        self.assertEqual((refusal.code, dict(refusal.headers)[b"retry-after"]), (429, b"60"))
