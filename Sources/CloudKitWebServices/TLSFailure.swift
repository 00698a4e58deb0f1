import AsyncHTTPClient
import NIOSSL

/// What went wrong in a TLS handshake, as words a person can act on; nil for any other error.
enum TLSFailure {
    static let handshakeTimedOut = "the TLS handshake did not finish in time (the server accepted the connection but never completed the handshake)"

    static func cause(of error: any Error) -> String? {
        if let error = error as? HTTPClientError, error == .tlsHandshakeTimeout { return handshakeTimedOut }
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return "its certificate is not for this host name (the name in baseURL is not among the certificate's names)"
        }
        guard let error = error as? NIOSSLError else { return nil }
        switch error {
        case .handshakeFailed(let failure):
            let text = "\(failure)"
            if text.contains("CERTIFICATE_VERIFY_FAILED") {
                return "its certificate does not verify against the trusted certificate authorities (CERTIFICATE_VERIFY_FAILED)"
            }
            if text.contains("WRONG_VERSION_NUMBER") || text.contains("PACKET_LENGTH_TOO_LONG") {
                return "the server did not answer in TLS (is it plain HTTP? then baseURL starts with http://)"
            }
            return "the TLS handshake failed (\(text))"
        case .noCertificateToValidate, .unableToValidateCertificate:
            return "its certificate could not be validated (\(error))"
        default:
            return nil
        }
    }
}
