"""Failed logins counted per address (access.throttle), at the door
(web/guard.py): past ten a minute, that address alone gets 429 for a
minute, before any checker runs."""

from types import SimpleNamespace

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase
from twisted.web.test.requesthelper import DummyRequest

from netweir_serve.access.throttle import LoginThrottle
from netweir_serve.web.audit import client_address
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

    def refuse(self, throttle, address):
        for _ in range(throttle.limit + 1):
            refused = throttle.failed(address)
        self.assertTrue(refused)

    def test_an_ipv6_client_is_counted_by_its_64(self):
        # Each wrong password from another address of the same /64.
        for n in range(10):
            self.assertFalse(self.throttle.failed(f"2001:db8:0:1::{n + 1:x}"))
        self.assertTrue(self.throttle.failed("2001:db8:0:1:ffff:ffff:ffff:ffff"))
        self.assertTrue(self.throttle.refused("2001:db8:0:1::abcd"))
        self.assertTrue(self.throttle.refused("2001:DB8:0:1::abcd%eth0"))
        # The next /64 is another network.
        self.assertFalse(self.throttle.refused("2001:db8:0:2::1"))

    def test_an_ipv4_mapped_address_is_its_ipv4_address(self):
        for _ in range(5):
            self.throttle.failed("::ffff:192.0.2.7")
        for _ in range(6):
            refused = self.throttle.failed("192.0.2.7")
        self.assertTrue(refused)
        self.assertTrue(self.throttle.refused("::ffff:192.0.2.7"))
        self.assertFalse(self.throttle.refused("192.0.2.8"))

    def test_unix_socket_clients_are_one(self):
        self.refuse(self.throttle, "unix")
        self.assertTrue(self.throttle.refused("unix"))
        self.assertFalse(self.throttle.refused("127.0.0.1"))

    def test_the_cap_never_lifts_a_refusal_before_its_minute_ends(self):
        throttle = LoginThrottle(self.clock, max_addresses=3)
        self.refuse(throttle, "10.0.0.1")
        # Many more addresses refused, and counters of many more, past the
        # cap: the first refusal stays its minute.
        for n in range(2, 10):
            self.refuse(throttle, f"10.0.0.{n}")
        for n in range(100):
            throttle.failed(f"10.0.1.{n}")
        self.clock.advance(59)
        self.assertTrue(throttle.refused("10.0.0.1"))
        self.assertLessEqual(len(throttle._failures), 3)
        self.clock.advance(1)
        self.assertFalse(throttle.refused("10.0.0.1"))
        # Ended refusals are forgotten as new ones come.
        self.refuse(throttle, "10.0.2.1")
        self.assertEqual(list(throttle._refused), ["10.0.2.1"])

    def test_the_cap_forgets_the_counter_failed_longest_ago(self):
        throttle = LoginThrottle(self.clock, max_addresses=2)
        for _ in range(5):
            throttle.failed("10.0.0.1")
        throttle.failed("10.0.0.2")
        throttle.failed("10.0.0.1")      # 10.0.0.1 failed last now
        throttle.failed("10.0.0.3")
        self.assertEqual(list(throttle._failures), ["10.0.0.1", "10.0.0.3"])


def request_from(host, authorization=None, forwarded=None, trusted=()):
    """A request from ``host`` (``unix``: a Unix socket's client), through
    a site trusting the proxies ``trusted``, with X-Forwarded-For
    ``forwarded`` (a list of header values)."""
    request = DummyRequest([b"x"])
    request.client = (UNIXAddress(b"/run/serve.sock") if host == "unix"
                      else IPv6Address("TCP", host, 5000) if ":" in host
                      else IPv4Address("TCP", host, 5000))
    request.site = SimpleNamespace(trusted_proxies=frozenset(trusted))
    if authorization is not None:
        request.requestHeaders.setRawHeaders(b"authorization", [authorization])
    if forwarded is not None:
        request.requestHeaders.setRawHeaders(b"x-forwarded-for", forwarded)
    return request


class ClientAddressTests(TestCase):
    """Who a request is from, for the throttle and the audit
    (web/audit.client_address), behind a proxy (--trusted-proxy) or not."""

    def test_a_trusted_proxy_gives_the_last_hop_of_x_forwarded_for(self):
        trusted = {"127.0.0.1"}
        self.assertEqual(client_address(request_from(
            "127.0.0.1", forwarded=[b"10.9.9.9, 203.0.113.5"], trusted=trusted)),
            "203.0.113.5")
        # Two headers are one list; the hops the client wrote are not read.
        self.assertEqual(client_address(request_from(
            "127.0.0.1", forwarded=[b"1.1.1.1", b"2001:db8::7"], trusted=trusted)),
            "2001:db8::7")
        # A header that does not end in an address, or none: the proxy's.
        for forwarded in ([b"10.0.0.1, nonsense"], [b""], None):
            self.assertEqual(client_address(request_from(
                "127.0.0.1", forwarded=forwarded, trusted=trusted)), "127.0.0.1")

    def test_an_untrusted_client_cannot_name_another_address(self):
        self.assertEqual(client_address(request_from(
            "198.51.100.4", forwarded=[b"10.0.0.1"], trusted={"127.0.0.1"})),
            "198.51.100.4")
        self.assertEqual(client_address(request_from("127.0.0.1", forwarded=[b"10.0.0.1"])),
                         "127.0.0.1")

    def test_a_unix_socket_proxy_and_an_ipv4_mapped_one(self):
        self.assertEqual(client_address(request_from("unix", forwarded=[b"10.0.0.1"])), "unix")
        self.assertEqual(client_address(request_from(
            "unix", forwarded=[b"10.0.0.1"], trusted={"unix"})), "10.0.0.1")
        self.assertEqual(client_address(request_from(
            "::ffff:127.0.0.1", forwarded=[b"10.0.0.1"], trusted={"127.0.0.1"})), "10.0.0.1")


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

    def test_behind_a_trusted_proxy_one_client_is_refused_and_another_served(self):
        def via_proxy(client, authorization):
            return self.code(request_from("127.0.0.1", authorization,
                                          forwarded=[client.encode()], trusted={"127.0.0.1"}))

        codes = [via_proxy("203.0.113.5", WRONG) for _ in range(20)]
        self.assertEqual(codes, [401] * 10 + [429] * 10)
        self.assertEqual(via_proxy("198.51.100.4", GOOD), 200)
        self.assertEqual(via_proxy("203.0.113.5", GOOD), 429)

    def test_a_unix_socket_client_is_throttled_too(self):
        codes = [self.code(request_from("unix", WRONG)) for _ in range(12)]
        self.assertEqual(codes, [401] * 10 + [429] * 2)

    def test_a_request_without_credentials_is_no_failure(self):
        codes = [self.code(request_from("10.0.0.1")) for _ in range(50)]
        self.assertEqual(codes, [401] * 50)
        self.assertEqual(self.code(request_from("10.0.0.1", GOOD)), 200)

    def test_malformed_credentials_and_bearer_values_naming_no_token_are_no_guesses(self):
        # The conformance suite's 12 wrong requests in a row (wrong user,
        # wrong password, malformed base64, a Bearer password, on three
        # paths each) must all be 401s: only the six guesses count.
        for authorization in (b"Basic !!notbase64!!", b"Bearer not-a-token",
                              b"Bearer s3cret:with colon") * 10:
            self.assertEqual(self.code(request_from("10.0.0.1", authorization)), 401)
        codes = [self.code(request_from("10.0.0.1", WRONG)) for _ in range(11)]
        self.assertEqual(codes, [401] * 10 + [429])

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
