"""The special token ids of every vocabulary this project trains or accepts.

The one place they are written: tokenizers, batching, masks, steps, decoding, analysis and
benchmarks import them from here. Padding is id 0 (and segment id 0), so an all-zero row is
empty; unknown, begin and end of sentence follow.
"""

PAD_ID = 0  # padding; never produced by a tokenizer's encode
UNK_ID = 1
BOS_ID = 2  # first decoder input of every sentence
EOS_ID = 3  # ends every source and target sequence
SPECIAL_IDS = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
FIRST_WORD_ID = max(SPECIAL_IDS.values()) + 1  # the lowest id of an ordinary piece
