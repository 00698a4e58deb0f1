import CloudKitWebServices
import ZoneFeed

extension TLSTrust {
    /// The system's store plus the certificates of the PEM file at `caFile`, read as the
    /// pipeline's own files are: at most `maxFileBytes`, and a FIFO nothing writes to refused
    /// after a few seconds rather than waited on for ever.
    static func reading(caFile: String) throws(Refusal) -> TLSTrust {
        switch TextFile.readOrSayWhy(atPath: caFile, maxBytes: maxFileBytes) {
        case .success(let pem):
            return try TLSTrust(caFile: caFile, pem: pem)
        case .failure(let failure):
            let why = failure.tooLarge ? ", and a bundle of every public CA is a few hundred kilobytes: check that this is the CA certificate" : ""
            throw Refusal(description: "the CA certificate file \(caFile) was not read: \(failure.reason)\(why)")
        }
    }
}
