"""--listen: the real daemon on a TLS endpoint (a certificate this test
makes, checked by a TLS client that verifies it), on a Unix socket, on
two endpoints at once and on a socket systemd would pass on; the auth rule
for endpoints other machines reach; SIGHUP reloading the TLS files."""

import datetime
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from twisted.trial import unittest

from netweir_serve.listening import ListenError, parse_listener, split_description

from .processes import ROOT, Daemon, free_port, wait_until


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class TestCA:
    """A certificate authority of this test's own, and server certificates
    for localhost and 127.0.0.1 that it signs."""

    def __init__(self, folder):
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.certificate = (
            x509.CertificateBuilder().subject_name(_name("netweir-serve test CA"))
            .issuer_name(_name("netweir-serve test CA")).public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256()))
        self.path = os.path.join(folder, "ca.pem")
        with open(self.path, "wb") as f:
            f.write(self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(self, key_path, cert_path):
        """Writes a new key and certificate for localhost; returns its serial."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        serial = x509.random_serial_number()
        certificate = (
            x509.CertificateBuilder().subject_name(_name("localhost"))
            .issuer_name(self.certificate.subject).public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"),
                x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(self.key, hashes.SHA256()))
        with open(key_path, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        with open(cert_path, "wb") as f:
            f.write(certificate.public_bytes(serialization.Encoding.PEM))
        return serial

    def client_context(self):
        """A TLS client context that trusts this CA alone and checks names."""
        context = ssl.create_default_context(cafile=self.path)
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        return context


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def exchange(connection, method, path, headers=None, body=None):
    """(status, JSON body or raw bytes) of one request on ``connection``."""
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        data = answer.read()
        if answer.getheader("Content-Type") == "application/json":
            data = json.loads(data)
        return answer.status, data
    finally:
        connection.close()


def https(ca, port, method="GET", path="/daemonstatus.json", host="localhost", **kw):
    connection = http.client.HTTPSConnection(host, port, context=ca.client_context(),
                                             timeout=10)
    return exchange(connection, method, path, **kw)


def served_serial(ca, port):
    """The serial number of the certificate the service shows now."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ca.client_context().wrap_socket(raw, server_hostname="localhost") as tls:
            der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def run_options(*argv, env=None):
    """(exit status, stderr) of netweir-serve started with ``argv`` that
    must stop at once."""
    base = tempfile.mkdtemp(prefix="listen-", dir=os.getcwd())
    done = subprocess.run([sys.executable, "-m", "netweir_serve", "--dir",
                           os.path.join(base, "dir"), *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={k: v for k, v in (env or os.environ).items()
                               if not k.startswith("NETWEIR_SERVE_")})
    return done.returncode, done.stderr


def maps_of(pid):
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


class ListenerParsingTests(unittest.TestCase):
    def test_descriptions_split_as_twisted_splits_them(self):
        self.assertEqual(split_description(r"tcp:6800:interface=\:\:1"),
                         (["tcp", "6800"], {"interface": "::1"}))
        self.assertEqual(split_description(r"unix:/run/a\=b.sock:mode=660"),
                         (["unix", "/run/a=b.sock"], {"mode": "660"}))
        # Unescaped, the first = of a part names it, as in Twisted.
        self.assertEqual(split_description("x:a=b=c"), (["x"], {"a": "b=c"}))

    def test_who_each_endpoint_lets_in(self):
        cases = {
            "tcp:6800:interface=127.0.0.1": "loopback",
            r"tcp:6800:interface=\:\:1": "loopback",
            "tcp:6800:interface=localhost": "loopback",
            "tcp:6800": "public",
            "tcp:6800:interface=0.0.0.0": "public",
            "tcp6:6800": "public",
            r"tcp6:6800:interface=\:\:1": "loopback",
            "unix:/tmp/x.sock": "unix socket",
            "systemd:domain=UNIX:index=0": "unix socket",
            "systemd:domain=INET:index=0": "unknown",
        }
        for text, reach in cases.items():
            self.assertEqual(parse_listener(text).reach, reach, text)

    def test_refused_descriptions_say_why(self):
        cases = {
            "": "needs a description",
            "tcp": "takes a port",
            "tcp:http": "whole number",
            "tcp:70000": "whole number",
            "tcp:6800:iface=x": "takes no iface=",
            "onion:80": "tcp:, tcp6:, ssl:, unix: and systemd:",
            "ssl:6443:privateKey=/no/such.pem": "no such file",
            "unix:/no/such/dir/x.sock": "does not exist",
            "unix:/tmp/x.sock:mode=rw": "octal",
            "systemd:domain=INET": "index=N or name=NAME",
            "systemd:domain=IPX:index=0": "domain=INET",
            "tcp:1:interface=a:interface=b": "twice",
        }
        for text, words in cases.items():
            with self.assertRaises(ListenError, msg=text) as caught:
                parse_listener(text)
            self.assertIn(words, str(caught.exception), text)


class RefusalTests(unittest.TestCase):
    def test_endpoints_other_machines_reach_need_a_password(self):
        port = free_port()
        for listen in (f"tcp:{port}", f"tcp:{port}:interface=0.0.0.0", f"tcp6:{port}"):
            status, err = run_options("--listen", listen)
            self.assertEqual(status, 2, err)
            self.assertIn(f"--listen {listen} lets other machines reach the service", err)
            self.assertEqual(len(err.strip().splitlines()), 2, err)  # the line, and --help's

    def test_bind_or_port_beside_listen_is_an_error(self):
        port = free_port()
        for extra in (["--bind", "127.0.0.1"], ["--port", str(port)]):
            status, err = run_options("--listen", f"tcp:{port}:interface=127.0.0.1", *extra)
            self.assertEqual(status, 2, err)
            self.assertIn(f"{extra[0]} beside --listen", err)

    def test_tls_files_that_do_not_load_stop_the_start(self):
        folder = os.path.abspath(self.mktemp())
        os.makedirs(folder)
        key = os.path.join(folder, "key.pem")
        with open(key, "w") as f:
            f.write("not a key\n")
        status, err = run_options("--listen", f"ssl:{free_port()}:privateKey={key}"
                                  ":interface=127.0.0.1")
        self.assertEqual(status, 2, err)
        self.assertIn("do not load", err)

    def test_a_systemd_socket_that_was_not_passed_on(self):
        status, err = run_options("--listen", "systemd:domain=INET:index=0")
        self.assertEqual(status, 2, err)
        self.assertIn("systemd passed on no such socket", err)


class TLSTests(unittest.TestCase):
    """HTTPS with a certificate this test's CA signed, and SIGHUP."""

    def setUp(self):
        folder = os.path.abspath(self.mktemp())
        os.makedirs(folder)
        self.ca = TestCA(folder)
        self.key, self.cert = os.path.join(folder, "key.pem"), os.path.join(folder, "cert.pem")
        self.first = self.ca.issue(self.key, self.cert)
        self.port = free_port()
        self.daemon = Daemon(os.path.join(folder, "dir"), args=[
            "--listen", f"ssl:{self.port}:privateKey={self.key}:certKey={self.cert}"
                        ":interface=127.0.0.1"]).spawn()
        self.addCleanup(self.daemon.kill)
        wait_until(self.answers, 30, "the daemon to answer over HTTPS")

    def answers(self):
        if self.daemon.process.poll() is not None:
            raise AssertionError(self.daemon.output())
        try:
            return https(self.ca, self.port)[0] == 200
        except OSError:
            return False

    def test_served_over_tls_to_a_client_that_verifies_it(self):
        status, answer = https(self.ca, self.port)
        self.assertEqual((status, answer["status"]), (200, "ok"))
        # The same CA check fails for a name the certificate doesn't have.
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw:
            with self.assertRaises(ssl.SSLCertVerificationError):
                self.ca.client_context().wrap_socket(raw, server_hostname="other.example")
        # Plain HTTP on the TLS port gets no answer.
        with self.assertRaises((http.client.HTTPException, OSError)):
            exchange(http.client.HTTPConnection("127.0.0.1", self.port, timeout=5),
                     "GET", "/daemonstatus.json")
        self.assertIn(f"listening on https://127.0.0.1:{self.port}/", self.daemon.output())

    def test_a_page_of_its_own_posts_with_its_https_origin(self):
        origin = f"https://localhost:{self.port}"
        form = {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin}
        status, answer = https(self.ca, self.port, "POST", "/cancel.json",
                               headers=form, body="project=shop&job=nosuch")
        self.assertEqual((status, answer["prevstate"]), (200, None))
        form["Origin"] = f"http://localhost:{self.port}"
        status, answer = https(self.ca, self.port, "POST", "/cancel.json",
                               headers=form, body="project=shop&job=nosuch")
        self.assertEqual(status, 403)

    def test_sighup_reloads_the_files_for_new_connections(self):
        self.assertEqual(served_serial(self.ca, self.port), self.first)
        # An open connection keeps its certificate; new ones get the new one.
        kept = http.client.HTTPSConnection("localhost", self.port,
                                           context=self.ca.client_context(), timeout=10)
        kept.connect()
        second = self.ca.issue(self.key, self.cert)
        os.kill(self.daemon.process.pid, signal.SIGHUP)
        wait_until(lambda: served_serial(self.ca, self.port) == second, 30,
                   "the new certificate")
        self.assertIn("TLS files reloaded", self.daemon.output())
        kept.request("GET", "/daemonstatus.json")
        self.assertEqual(kept.getresponse().status, 200)
        kept.close()
        # A bad new file: logged, the certificate before stays.
        with open(self.key, "w") as f:
            f.write("-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n")
        os.kill(self.daemon.process.pid, signal.SIGHUP)
        wait_until(lambda: "not reloaded" in self.daemon.output(), 30, "the reload to fail")
        self.assertEqual(served_serial(self.ca, self.port), second)
        self.assertEqual(https(self.ca, self.port)[0], 200)
        self.assertIsNone(self.daemon.process.poll())

    def test_tls_is_loaded_only_for_an_ssl_endpoint(self):
        self.assertIn("cryptography", maps_of(self.daemon.process.pid))
        plain = Daemon(self.daemon.directory + "-plain").start()
        self.addCleanup(plain.kill)
        self.assertNotIn("cryptography", maps_of(plain.process.pid))


class UnixAndTwoEndpointsTests(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp(prefix="unix-", dir="/tmp")
        self.socket = os.path.join(self.folder, "serve.sock")
        self.port = free_port()

    def start(self, *listens, env=None):
        args = []
        for listen in listens:
            args += ["--listen", listen]
        base = os.path.abspath(self.mktemp())
        os.makedirs(base)
        daemon = Daemon(os.path.join(base, "dir"), args=args, env=env).spawn()
        self.addCleanup(daemon.kill)
        return daemon

    def unix(self, path="/daemonstatus.json", host="evil.example", **kw):
        return exchange(UnixConnection(self.socket), "GET", path,
                        headers={"Host": host}, **kw)

    def wait_unix(self, daemon):
        def ready():
            if daemon.process.poll() is not None:
                raise AssertionError(daemon.output())
            try:
                return self.unix()[0] in (200, 401)
            except OSError:
                return False
        wait_until(ready, 30, "the daemon to answer on its Unix socket")

    def test_a_unix_socket_guarded_by_its_mode(self):
        daemon = self.start(f"unix:{self.socket}:mode=600")
        self.wait_unix(daemon)
        self.assertEqual(os.stat(self.socket).st_mode & 0o777, 0o600)
        # No Host check: no browser reaches a Unix socket, a proxy in front may.
        status, answer = self.unix(host="crawl.example.com")
        self.assertEqual((status, answer["status"]), (200, "ok"))
        self.assertIn(f"listening on unix:{self.socket}", daemon.output())
        # The start-up line names the job table, the SQLite file of its --dir.
        self.assertIn(f"; job table {os.path.join(daemon.directory, 'jobs.db')}; projects:",
                      daemon.output())

    def test_two_endpoints_at_once(self):
        daemon = self.start(f"tcp:{self.port}:interface=127.0.0.1", f"unix:{self.socket}",
                            env={"NETWEIR_SERVE_USERNAME": "me", "NETWEIR_SERVE_PASSWORD": "pw"})
        self.wait_unix(daemon)
        daemon.port = self.port
        # The password is asked on both; the Host check is the TCP one's.
        self.assertEqual(self.unix()[0], 401)
        auth = {"Authorization": "Basic bWU6cHc="}
        self.assertEqual(exchange(UnixConnection(self.socket), "GET", "/daemonstatus.json",
                                  headers=dict(auth, Host="crawl.example.com"))[0], 200)
        self.assertEqual(daemon.call("GET", "/daemonstatus.json", headers=auth)[0], 200)
        self.assertEqual(daemon.call("GET", "/daemonstatus.json", headers=dict(
            auth, Host="crawl.example.com"))[0], 403)
        output = daemon.output()
        self.assertIn(f"http://127.0.0.1:{self.port}/, unix:{self.socket}", output)

    def test_connection_caps_are_shared_by_every_endpoint(self):
        daemon = self.start(f"tcp:{self.port}:interface=127.0.0.1", f"unix:{self.socket}")
        self.wait_unix(daemon)
        held = []
        try:
            for _ in range(8):  # the cap of one address: all Unix clients are one
                s = socket.socket(socket.AF_UNIX)
                s.connect(self.socket)
                held.append(s)
            extra = socket.socket(socket.AF_UNIX)
            extra.connect(self.socket)
            extra.settimeout(10)
            extra.sendall(b"GET /daemonstatus.json HTTP/1.0\r\n\r\n")
            try:
                self.assertEqual(extra.recv(100), b"")  # closed unanswered
            except ConnectionResetError:
                pass  # closed with the request unread
            extra.close()
            daemon.port = self.port
            self.assertEqual(daemon.call("GET", "/daemonstatus.json")[0], 200)
        finally:
            for s in held:
                s.close()

    def systemd_start(self, address):
        """netweir-serve started as systemd starts a service for a socket
        unit, on a socket bound to ``address``: (process, port)."""
        listening = socket.socket()
        listening.bind((address, 0))
        listening.listen(16)
        port = listening.getsockname()[1]
        base = os.path.abspath(self.mktemp())
        os.makedirs(base)
        # The socket as fd 3, LISTEN_FDS=1, LISTEN_FDNAMES, and LISTEN_PID
        # the service's own pid (this step's, kept by exec).
        step = ("import os, sys; os.dup2(int(sys.argv[1]), 3);"
                " os.environ.update(LISTEN_FDS='1', LISTEN_FDNAMES='netweir-serve',"
                " LISTEN_PID=str(os.getpid()));"
                " os.execv(sys.executable,"
                " [sys.executable, '-m', 'netweir_serve'] + sys.argv[2:])")
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETWEIR_SERVE_")}
        process = subprocess.Popen(
            [sys.executable, "-c", step, str(listening.fileno()), "--listen",
             "systemd:domain=INET:index=0", "--dir", os.path.join(base, "dir")],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, start_new_session=True, pass_fds=(listening.fileno(),))
        self.addCleanup(lambda: (process.poll() is None and process.kill(), process.wait(),
                                 process.stderr.close()))
        listening.close()
        return process, port

    def test_a_socket_systemd_passes_on(self):
        process, port = self.systemd_start("127.0.0.1")
        daemon = Daemon(os.path.abspath(self.mktemp()))
        daemon.port = port

        def ready():
            if process.poll() is not None:
                raise AssertionError(process.stderr.read().decode())
            try:
                return daemon.get("daemonstatus.json")[0] == 200
            except OSError:
                return False
        wait_until(ready, 30, "the daemon to answer on the socket systemd passed on")
        # A loopback socket: the Host check is on.
        self.assertEqual(daemon.call("GET", "/daemonstatus.json",
                                     headers={"Host": "evil.example"})[0], 403)
        os.kill(process.pid, signal.SIGTERM)
        self.assertEqual(process.wait(60), 0)

    def test_a_public_systemd_socket_needs_a_password(self):
        process, _ = self.systemd_start("0.0.0.0")
        self.assertEqual(process.wait(60), 2)
        self.assertIn("lets other machines reach the service", process.stderr.read().decode())
