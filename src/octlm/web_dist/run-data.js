// No run and no study (octlm serve or export-web without --run or --study, or the built page opened as a file): the playgrounds alone
